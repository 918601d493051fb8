"""Property: every stream the dialect writers produce, for any text split and any calls,
is accumulated by the official SDKs' own stream parsers into the reply that was meant."""

from __future__ import annotations

import json
from typing import Any

import orjson
from anthropic.lib.streaming._messages import accumulate_event
from hypothesis import given, settings
from hypothesis import strategies as st
from openai import omit
from openai._models import construct_type_unchecked
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from reflexguard.dialects import messages, responses
from reflexguard.dialects.native_stream import MessagesWriter, ResponsesWriter
from tests.dialects.test_translation_properties import calls, chat_completion

pieces = st.lists(st.text(min_size=1, max_size=12), max_size=4)


def parse(stream: list[bytes]) -> list[dict[str, Any]]:
    events = []
    for frame in b"".join(stream).split(b"\n\n"):
        for line in frame.split(b"\n"):
            if line.startswith(b"data: "):
                events.append(orjson.loads(line[6:]))
    return events


@settings(max_examples=100, deadline=None)
@given(pieces, calls())
def test_anthropic_sdk_accumulates_every_messages_stream(streamed, found):
    reply = messages.native_of(chat_completion(None, found), {"model": "m"}, None)
    writer = MessagesWriter({**reply, "content": []})
    frames = [frame for piece in streamed for frame in writer.text(piece)]
    frames += writer.finish(reply, None)
    snapshot = None
    buffers: dict[int, bytes] = {}
    for event in parse(frames):
        if event["type"] == "ping":
            continue
        snapshot = accumulate_event(event=event, current_snapshot=snapshot,  # type: ignore
                                    json_bufs=buffers)
    assert snapshot is not None
    texts = [b.text for b in snapshot.content if b.type == "text"]
    assert "".join(texts) == "".join(streamed)
    uses = [(b.id, b.name, b.input) for b in snapshot.content if b.type == "tool_use"]
    assert uses == [(i, n, a) for i, n, a in found]
    assert snapshot.stop_reason == ("tool_use" if found else "end_turn")


@settings(max_examples=100, deadline=None)
@given(pieces, calls())
def test_openai_sdk_accumulates_every_responses_stream(streamed, found):
    reply = responses.native_of(chat_completion(None, found), {"model": "m"}, None)
    writer = ResponsesWriter(reply)
    frames = [frame for piece in streamed for frame in writer.text(piece)]
    frames += writer.finish(reply, None)
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    events = parse(frames)
    for event in events:
        state.handle_event(construct_type_unchecked(type_=ResponseStreamEvent,  # type: ignore
                                                    value=event))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["id"] == reply["id"]
    text = "".join(p["text"] for i in final["output"] if i["type"] == "message"
                   for p in i["content"])
    assert text == "".join(streamed)
    assert [(i["call_id"], i["name"], json.loads(i["arguments"])) for i in final["output"]
            if i["type"] == "function_call"] == [(i, n, a) for i, n, a in found]
