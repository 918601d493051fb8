"""Thinking blocks and reasoning items: kept in rewritten replies, echoed in re-asks, and
forwarded in streams the official SDK parsers accumulate. Pure functions, no sockets."""

from __future__ import annotations

import copy
from typing import Any

from anthropic.lib.streaming._messages import accumulate_event
from openai import omit
from openai._models import construct_type_unchecked
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from reflexguard.core.channels import Channel
from reflexguard.core.model import CallVerdict, ToolCall, Verdict
from reflexguard.core.model import Reply as CoreReply
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects import messages, responses
from reflexguard.dialects.native import echoing_builders
from reflexguard.dialects.native_stream import (
    MessagesEvents,
    MessagesWriter,
    ResponsesEvents,
    ResponsesWriter,
)
from tests.dialects.test_streams_sdk_parsers import parse
from tests.dialects.test_translation_properties import chat_completion
from tests.fakes.native_replies import (
    anthropic_call,
    anthropic_stream,
    function_call,
    openai_response,
    reasoning_item,
    redacted_block,
    responses_stream,
    thinking_block,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

THINKING = [thinking_block("hmm", "sig"), redacted_block("r")]
REASONING = reasoning_item("think", "rs_1", "enc")
CALL = ("call_1", "get_order_details", GOOD)


def toolset() -> Any:
    tools = messages.chat_tools(messages_body()["tools"])
    return ToolSetCache().get(tools)


def verdict() -> Verdict:
    return Verdict(calls=(CallVerdict(channel=Channel.UNKNOWN_TOOL, index=0, name="nope"),))


def failed() -> CoreReply:
    return CoreReply(tool_calls=(ToolCall(id="call_1", name="nope", arguments="{}"),))


def test_messages_native_of_keeps_the_templates_thinking_first():
    template = anthropic_call("get_order_details", GOOD, thinking=THINKING)
    reply = messages.native_of(chat_completion(None, [CALL]), messages_body(), template)
    assert reply["content"][:2] == THINKING and reply["content"][2]["type"] == "tool_use"
    assert messages.native_of(chat_completion(None, [CALL]), messages_body(), None)[
        "content"][0]["type"] == "tool_use"


def test_responses_native_of_keeps_the_templates_reasoning_first():
    template = openai_response(REASONING, function_call("get_order_details", GOOD))
    reply = responses.native_of(chat_completion(None, [CALL]), responses_body(), template)
    assert reply["output"][0] == REASONING and reply["output"][1]["type"] == "function_call"


def test_reasks_echo_reasoning_without_touching_the_callers_body():
    for dialect, body, items in ((messages.MESSAGES, messages_body(), THINKING),
                                 (responses.RESPONSES, responses_body(), [REASONING])):
        snapshot = copy.deepcopy(body)
        builders = echoing_builders(dialect, lambda items=items: items)  # type: ignore[misc]
        request = builders.reask(body, failed(), verdict(), toolset())
        assert body == snapshot
        if dialect is messages.MESSAGES:
            echoed = request["messages"][-2]
            assert echoed["role"] == "assistant" and echoed["content"][:2] == THINKING
            assert echoed["content"][2]["type"] == "tool_use"
        else:
            assert [i["type"] for i in request["input"]] == [
                "message", "reasoning", "function_call", "function_call_output"]
        plain = echoing_builders(dialect, lambda: []).reask(body, failed(), verdict(),
                                                            toolset())
        assert plain == dialect.builders.reask(body, failed(), verdict(), toolset())


def test_messages_events_forward_thinking_the_sdk_accumulates():
    upstream = anthropic_call("get_order_details", GOOD, thinking=THINKING)
    events = MessagesEvents()
    writer: MessagesWriter | None = None
    frames: list[bytes] = []
    for data in parse(anthropic_stream(upstream)):
        events.chunks(data)
        if writer is None and events.skeleton:
            writer = MessagesWriter(events.skeleton)
        for forwarded in events.forward:
            assert writer is not None
            frames += writer.forward(forwarded)
        events.forward.clear()
    assert events.reasoning == THINKING and writer is not None
    reply = messages.native_of(chat_completion(None, [CALL]), messages_body(), events.skeleton)
    frames += writer.finish(reply, None)
    snapshot = None
    buffers: dict[int, bytes] = {}
    for event in parse(frames):
        if event["type"] != "ping":
            snapshot = accumulate_event(event=event, current_snapshot=snapshot,  # type: ignore
                                        json_bufs=buffers)
    assert snapshot is not None
    assert [b.model_dump(exclude_none=True) for b in snapshot.content[:2]] == THINKING
    assert snapshot.content[2].type == "tool_use" and snapshot.content[2].input == GOOD


def test_responses_events_forward_reasoning_the_sdk_accumulates():
    upstream = openai_response(REASONING, function_call("get_order_details", GOOD))
    events = ResponsesEvents()
    writer: ResponsesWriter | None = None
    frames: list[bytes] = []
    for data in parse(responses_stream(upstream)):
        events.chunks(data)
        if writer is None and events.skeleton:
            writer = ResponsesWriter(events.skeleton)
        for forwarded in events.forward:
            assert writer is not None
            frames += writer.forward(forwarded)
        events.forward.clear()
    assert events.reasoning == [REASONING] and writer is not None
    reply = responses.native_of(chat_completion(None, [CALL]), responses_body(),
                                events.skeleton)
    frames += writer.finish(reply, None)
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    written = parse(frames)
    for event in written:
        state.handle_event(construct_type_unchecked(type_=ResponseStreamEvent,  # type: ignore
                                                    value=event))
    assert [e["sequence_number"] for e in written] == list(range(len(written)))
    final = written[-1]["response"]["output"]
    assert final[0] == REASONING and [i["type"] for i in final] == ["reasoning",
                                                                    "function_call"]
