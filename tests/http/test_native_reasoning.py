"""Thinking blocks (Messages) and reasoning items (Responses) from a native upstream survive
guarding: forwarded in streams as they come, kept in rewritten replies, and echoed in the
re-ask of a failed turn. The official SDKs read every answer; the upstream is scripted."""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import openai

from tests.fakes.fake_upstream import Scripted
from tests.fakes.native_replies import (
    anthropic_call,
    function_call,
    message_item,
    openai_response,
    reasoning_item,
    redacted_block,
    thinking_block,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

THINKING_A = [thinking_block("The user wants an order; look it up.", "sig-A"),
              redacted_block("redacted-A")]
THINKING_B = [thinking_block("The tool is get_order_details.", "sig-B")]
EXTRA = {"thinking": {"type": "enabled", "budget_tokens": 1024}}


def anthropic_sdk(client: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=str(client.make_url("")), api_key="dummy",
                                    max_retries=0)


def openai_sdk(client: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="dummy",
                              max_retries=0)


def blocks(message: Any) -> list[dict[str, Any]]:
    return [b.model_dump(exclude_none=True) for b in message.content
            if b.type in ("thinking", "redacted_thinking")]


# -- Messages -------------------------------------------------------------------------------


async def test_messages_valid_reply_keeps_its_thinking(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(anthropic_call("get_order_details", GOOD, thinking=THINKING_A))]
    message = await anthropic_sdk(await proxy()).messages.create(**messages_body(),
                                                                  extra_body=EXTRA)
    assert blocks(message) == THINKING_A and message.content[-1].type == "tool_use"


async def test_messages_repaired_reply_has_the_reasks_thinking_and_echoes_the_failed(
        fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(anthropic_call("get_order_detail", GOOD, thinking=THINKING_A)),
                       Scripted(anthropic_call("get_order_details", GOOD, call_id="toolu_2",
                                               thinking=THINKING_B))]
    body = messages_body()
    snapshot = copy.deepcopy(body)
    message = await anthropic_sdk(await proxy()).messages.create(**body, extra_body=EXTRA)
    assert body == snapshot and upstream.calls == 2
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert blocks(message) == THINKING_B  # the thinking of the attempt whose call is returned
    assert message.content[1].name == "get_order_details"
    echoed, results = upstream.requests[1]["messages"][-2:]
    assert echoed["content"][:2] == THINKING_A  # unmodified, signatures included
    assert [b["type"] for b in echoed["content"]] == ["thinking", "redacted_thinking",
                                                      "tool_use"]
    assert results["content"][0]["type"] == "tool_result"
    assert upstream.requests[1]["thinking"] == EXTRA["thinking"]


async def test_messages_stream_forwards_thinking_and_the_reask_echoes_it(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(anthropic_call("get_order_detail", GOOD, text="Looking.",
                                               thinking=THINKING_A)),
                       Scripted(anthropic_call("get_order_details", GOOD, call_id="toolu_2",
                                               thinking=THINKING_B))]
    async with anthropic_sdk(await proxy()).messages.stream(**messages_body(),
                                                            extra_body=EXTRA) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_message()
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas.count("thinking_delta") > 1  # the upstream's deltas, one by one
    assert "signature_delta" in deltas
    starts = [(e.index, e.content_block.type) for e in events
              if e.type == "content_block_start"]
    assert starts == [(0, "thinking"), (1, "redacted_thinking"), (2, "text"), (3, "thinking"),
                      (4, "tool_use")]
    assert [b.type for b in final.content] == ["thinking", "redacted_thinking", "text",
                                               "thinking", "tool_use"]
    assert blocks(final) == [*THINKING_A, *THINKING_B]
    assert final.content[-1].input == GOOD and final.content[2].text == "Looking."
    echoed = upstream.requests[1]["messages"][-2]
    assert echoed["content"][:2] == THINKING_A  # accumulated from the stream, as sent


async def test_messages_valid_stream_with_thinking(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(anthropic_call("get_order_details", GOOD, thinking=THINKING_A))]
    async with anthropic_sdk(await proxy()).messages.stream(**messages_body()) as stream:
        final = await stream.get_final_message()
    assert blocks(final) == THINKING_A
    assert [b.type for b in final.content][-1] == "tool_use" and upstream.calls == 1


# -- Responses ------------------------------------------------------------------------------

REASONING_A = reasoning_item("Find the order tool.", "rs_A", "enc-A")
REASONING_B = reasoning_item("Use get_order_details.", "rs_B", "enc-B")
BROKEN = '{"order_id": '


def reasoning(response: Any) -> list[dict[str, Any]]:
    return [i.model_dump(exclude_none=True) for i in response.output if i.type == "reasoning"]


async def test_responses_repaired_reply_has_the_reasks_reasoning_and_echoes_the_failed(
        fake, proxy):
    upstream, _ = fake
    upstream.script = [
        Scripted(openai_response(REASONING_A, function_call("get_order_details", BROKEN))),
        Scripted(openai_response(REASONING_B, function_call("get_order_details", GOOD)))]
    body = responses_body(include=["reasoning.encrypted_content"])
    snapshot = copy.deepcopy(body)
    response = await openai_sdk(await proxy()).responses.create(**body)
    assert body == snapshot
    assert [i.type for i in response.output] == ["reasoning", "function_call"]
    assert reasoning(response) == [REASONING_B]
    assert json.loads(response.output[1].arguments) == GOOD
    reask = upstream.requests[1]["input"]
    assert [i["type"] for i in reask] == ["message", "reasoning", "function_call",
                                          "function_call_output"]
    assert reask[1] == REASONING_A


async def test_responses_valid_reply_keeps_its_reasoning(fake, proxy):
    upstream, _ = fake
    upstream.script = [
        Scripted(openai_response(REASONING_A, function_call("get_order_details", GOOD)))]
    response = await openai_sdk(await proxy()).responses.create(**responses_body())
    assert reasoning(response) == [REASONING_A]


async def test_responses_stream_forwards_reasoning_and_the_reask_echoes_it(fake, proxy):
    upstream, _ = fake
    upstream.script = [
        Scripted(openai_response(REASONING_A, message_item("Looking."),
                                 function_call("get_order_details", BROKEN))),
        Scripted(openai_response(REASONING_B, function_call("get_order_details", GOOD)))]
    async with openai_sdk(await proxy()).responses.stream(**responses_body()) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds.count("response.reasoning_summary_text.delta") > 1  # as they came
    assert kinds.index("response.reasoning_summary_text.delta") < \
        kinds.index("response.output_text.delta")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [(e.output_index, e.item.type) for e in events
             if e.type == "response.output_item.added"]
    assert added == [(0, "reasoning"), (1, "message"), (2, "reasoning"), (3, "function_call")]
    assert [i.type for i in final.output] == ["reasoning", "message", "reasoning",
                                              "function_call"]
    assert reasoning(final) == [REASONING_A, REASONING_B]
    assert json.loads(final.output[3].arguments) == GOOD
    reask = upstream.requests[1]["input"]
    assert [i["type"] for i in reask] == ["message", "reasoning", "message", "function_call",
                                          "function_call_output"]
    assert reask[1] == REASONING_A


async def test_responses_valid_stream_with_reasoning(fake, proxy):
    upstream, _ = fake
    upstream.script = [
        Scripted(openai_response(REASONING_A, function_call("get_order_details", GOOD)))]
    stream = await openai_sdk(await proxy()).responses.create(**responses_body(), stream=True)
    events = [event async for event in stream]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in done] == ["reasoning", "function_call"]
    assert done[0].model_dump(exclude_none=True) == REASONING_A
    final = events[-1].response  # type: ignore[union-attr]
    assert [i.type for i in final.output] == ["reasoning", "function_call"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
