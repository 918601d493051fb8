"""Streams at realistic and hostile sizes (issue 18, items 5 and 6): SSE lines as long as a
request body may be are accepted, and held text costs O(1) per delta.

No timed assertion: the held-text test counts the characters the release decision reads
(quadratic in the deltas when all text was re-joined on every delta).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import reflexguard.dialects.chat_stream as chat_stream
from reflexguard.dialects.chat_stream import StreamAssembler
from tests.conftest import chat_body
from tests.fakes.native_replies import anthropic_call, anthropic_stream
from tests.http.dialect_fixtures import messages_body, responses_body
from tests.http.test_stream_fields import parse_sse, sse_proxy  # noqa: F401 -- the fixture

BIG = {"order_id": "#W" + "1" * 600_000, "detail": "full"}  # a valid call of 600 KB
BIG_ARGS = json.dumps(BIG)


def sse(name: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def responses_call_events(arguments: str, step: int) -> list[bytes]:
    """A Responses function call streamed in `step`-character deltas; its `.done`,
    `output_item.done` and `response.completed` events carry the whole arguments."""
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1",
            "name": "get_order_details", "arguments": arguments, "status": "completed"}
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "simulated",
                "status": "completed", "output": [item], "error": None,
                "incomplete_details": None, "tools": [], "tool_choice": "auto",
                "parallel_tool_calls": True, "metadata": {},
                "usage": {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10}}
    events = [{"type": "response.created",
               "response": {**response, "status": "in_progress", "output": []}},
              {"type": "response.output_item.added", "output_index": 0,
               "item": {**item, "arguments": "", "status": "in_progress"}}]
    events += [{"type": "response.function_call_arguments.delta", "item_id": "fc_1",
                "output_index": 0, "delta": arguments[at:at + step]}
               for at in range(0, len(arguments), step)]
    events += [{"type": "response.function_call_arguments.done", "item_id": "fc_1",
                "output_index": 0, "arguments": arguments},
               {"type": "response.output_item.done", "output_index": 0, "item": item},
               {"type": "response.completed", "response": response}]
    return [sse(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]


def chat_call_events(arguments: str) -> list[bytes]:
    """A chat stream whose whole call (600 KB) comes in one chunk."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "simulated"}
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "get_order_details", "arguments": arguments}}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "tool_calls": [call]},
                                    "finish_reason": None}]},
              {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
    return [sse(None, c) for c in chunks] + [b"data: [DONE]\n\n"]


async def test_a_responses_stream_with_a_600_kb_call_in_1_kb_deltas_is_answered(
        sse_proxy: Any) -> None:  # noqa: F811
    client = await sse_proxy(responses_call_events(BIG_ARGS, 1024))
    response = await client.post("/v1/responses", json=responses_body(stream=True))
    body = await response.text()
    assert response.status == 200, body[:300]
    events = parse_sse(body)
    assert events[-1][0] == "response.completed", body[-300:]
    output = events[-1][1]["response"]["output"]
    assert json.loads(output[0]["arguments"]) == BIG


async def test_a_chat_stream_with_a_600_kb_call_in_one_chunk_is_answered(
        sse_proxy: Any) -> None:  # noqa: F811
    client = await sse_proxy(chat_call_events(BIG_ARGS))
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    body = await response.text()
    assert response.status == 200, body[:300]
    events = parse_sse(body)
    assert events[-1][1] == "[DONE]"
    arguments = "".join(c["function"]["arguments"] for _, data in events[:-1]
                        for choice in data.get("choices", [])
                        for c in choice["delta"].get("tool_calls", []))
    assert json.loads(arguments) == BIG


async def test_a_messages_stream_with_a_600_kb_call_is_answered(
        sse_proxy: Any) -> None:  # noqa: F811
    events = anthropic_stream(anthropic_call("get_order_details", BIG))
    # anthropic_stream cuts input JSON in 10-character deltas: re-cut in one 600 KB delta.
    head = [e for e in events if b'"input_json_delta"' not in e]
    at = next(n for n, e in enumerate(head) if b"content_block_stop" in e)
    whole = sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
        "type": "input_json_delta", "partial_json": BIG_ARGS}})
    client = await sse_proxy([*head[:at], whole, *head[at:]])
    response = await client.post("/v1/messages", json=messages_body(stream=True))
    body = await response.text()
    assert response.status == 200, body[:300]
    parsed = parse_sse(body)
    assert parsed[-1][0] == "message_stop"
    partial = "".join(d["delta"]["partial_json"] for n, d in parsed
                      if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
    assert json.loads(partial) == BIG


async def test_a_line_longer_than_the_body_limit_ends_the_stream_cleanly(
        sse_proxy: Any) -> None:  # noqa: F811
    """The bound that replaces aiohttp's: a line past max_body_bytes is refused, said in
    the dialect's error format (here before any byte: a 502)."""
    client = await sse_proxy(chat_call_events("x" * 40_000), max_body_bytes=32 * 1024)
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert response.status == 502
    assert "exceeds" in (await response.json())["error"]["message"]


def characters_read_to_decide(deltas: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    read = [0]
    decide = chat_stream._could_open_call

    def counted(text: str) -> bool:
        read[0] += len(text)
        return decide(text)

    monkeypatch.setattr(chat_stream, "_could_open_call", counted)
    assembler = StreamAssembler()
    for delta in deltas:
        assembler.feed({"choices": [{"index": 0, "delta": {"content": delta}}]})
    assembler.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    assert assembler.reply().content == "".join(deltas)
    return read[0]


@pytest.mark.parametrize("opening", ["```python\n", "{", "<tool_call>", "   \n  [", ""])
def test_held_text_is_decided_from_its_head_alone(opening: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    deltas = [opening] + ["x = "] * 30_000
    read = characters_read_to_decide(deltas, monkeypatch)
    # At most the head (11 characters) per delta; the whole text joined was 1.8e9.
    assert read <= 11 * len(deltas), read


def test_held_text_is_released_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision itself is unchanged: whitespace first stays undecided, a visible
    character that opens nothing releases it all at once."""
    assembler = StreamAssembler()
    assert not assembler.feed({"choices": [{"index": 0, "delta": {"content": "  \n"}}]})
    assert not assembler.feed({"choices": [{"index": 0, "delta": {"content": " `"}}]})
    assert not assembler.feed({"choices": [{"index": 0, "delta": {"content": "`"}}]})
    assert not assembler.feed({"choices": [{"index": 0, "delta": {"content": "x"}}]})
    assert assembler.released_text and assembler.pending_flush == "  \n ``x"
    fence = StreamAssembler()
    for piece in ("`", "``", "json\n", "{}"):
        fence.feed({"choices": [{"index": 0, "delta": {"content": piece}}]})
    assert not fence.released_text and fence.held_text == "```json\n{}"


def test_a_long_broken_argument_is_not_guessed_at(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the fuzz suite's Messages route (a 600 KB partial_json): json-repair took
    17 s on the loop for a 600 KB unterminated string. Past MAX_JSON_REPAIR_CHARS no guess
    is made (the call is re-asked)."""
    import reflexguard.core.fixes as fixes

    def never(_: str) -> Any:
        raise AssertionError("json_repair ran on a 600 KB argument")

    monkeypatch.setattr(fixes.json_repair, "loads", never)
    assert fixes._repaired_json('{"order_id": "' + "x" * 600_000) is None
