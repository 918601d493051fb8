"""Streams reach the agent promptly and in few writes (issue 23), with the full reading's
bytes: what one network read of the upstream releases goes out in one write, and a held
call goes out with the stream's end in one write. Text that opens a call written as text
is still held (and lifted under tool_call_format content).

The upstream is the scripted SSE server on a real loopback socket (SseUpstream), here
writing a whole answer in one piece, as a server flushing a batch of tokens does;
reflexguard runs in front of it as served. Writes are counted at reflexguard's one writer to
the agent (ClientStream); no timing is asserted.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

import reflexguard.http.streams as streams
from bench.perf.chunks import stream_chunks
from reflexguard.http.client_stream import ClientStream
from reflexguard.http.sse import SseLines, StreamBroken
from tests.conftest import chat_body
from tests.fakes.fake_upstream import text_completion, tool_call_completion
from tests.fakes.native_replies import (
    anthropic_call,
    anthropic_message,
    anthropic_stream,
    function_call,
    message_item,
    openai_response,
    responses_stream,
    text_block,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body
from tests.http.test_stream_fields import parse_sse, sse_proxy  # noqa: F401 -- the fixture

TEXT = "Your order #W1234567 has shipped and should arrive on Tuesday. " * 3
WRITTEN_CALL = '```json\n{"name": "get_order_details", "arguments": ' + json.dumps(GOOD) + "}\n```"


def chat_events(completion: dict[str, Any]) -> list[bytes]:
    return [b"data: " + json.dumps(c).encode() + b"\n\n"
            for c in stream_chunks(completion, include_usage=False)] + [b"data: [DONE]\n\n"]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes]]:
    """Every write reflexguard makes to the agent: ("write", bytes) or ("end", bytes)."""
    seen: list[tuple[str, bytes]] = []
    write, end = ClientStream.write, ClientStream.end

    async def counted_write(self: ClientStream, data: bytes) -> None:
        seen.append(("write", data))
        await write(self, data)

    async def counted_end(self: ClientStream, data: bytes = b"") -> Any:
        seen.append(("end", data))
        return await (end(self, data) if data else end(self))

    monkeypatch.setattr(ClientStream, "write", counted_write)
    monkeypatch.setattr(ClientStream, "end", counted_end)
    return seen


def data_lines(stream: bytes) -> list[bytes]:
    return [line for line in stream.split(b"\n") if line.startswith(b"data: ")]


async def test_a_burst_of_chat_text_goes_out_in_one_write_byte_identical(
        sse_proxy: Any, writes: list[tuple[str, bytes]]) -> None:  # noqa: F811
    events = chat_events(text_completion(TEXT))
    client = await sse_proxy([b"".join(events)])
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    body = await response.read()
    assert response.status == 200, body[:300]
    text_events = [e for e in events if b'"content": "' in e and b'"content": ""' not in e]
    assert len(text_events) > 20
    # Every event up to the finish is the upstream's own bytes, in order.
    sent = data_lines(body)
    assert sent[:1 + len(text_events)] == data_lines(b"".join(events[:1 + len(text_events)]))
    # One read released the role and every text delta: one write, then the end (the
    # full reading wrote each event on its own: 1 + 27 writes).
    passed = [data for kind, data in writes if kind == "write"]
    assert len(passed) <= 4, [len(p) for p in passed]  # slack for a read cut short
    assert writes[-1][0] == "end" and writes[-1][1].endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("route", ["messages", "responses"])
async def test_a_burst_of_native_text_goes_out_in_one_write(
        route: str, sse_proxy: Any, writes: list[tuple[str, bytes]]) -> None:  # noqa: F811
    if route == "messages":
        events = anthropic_stream(anthropic_message(text_block(TEXT)))
        body = messages_body(stream=True)
    else:
        events = responses_stream(openai_response(message_item(TEXT)))
        body = responses_body(stream=True)
    client = await sse_proxy([b"".join(events)])
    response = await client.post(f"/v1/{route}", json=body)
    text = await response.text()
    assert response.status == 200, text[:300]
    parsed = parse_sse(text)
    kind = "content_block_delta" if route == "messages" else "response.output_text.delta"
    deltas = [d["delta"]["text"] if route == "messages" else d["delta"]
              for name, d in parsed if name == kind]
    assert "".join(deltas) == TEXT and len(deltas) > 20
    assert parsed[-1][0] == ("message_stop" if route == "messages" else "response.completed")
    passed = [data for kind, data in writes if kind == "write"]
    assert len(passed) <= 4, [len(p) for p in passed]  # slack for a read cut short


@pytest.mark.parametrize("route", ["chat/completions", "messages", "responses"])
async def test_a_held_call_reaches_the_agent_with_the_end_in_one_write(
        route: str, sse_proxy: Any, writes: list[tuple[str, bytes]]) -> None:  # noqa: F811
    if route == "messages":
        events = anthropic_stream(anthropic_call("get_order_details", GOOD))
        body, last = messages_body(stream=True), b"event: message_stop"
    elif route == "responses":
        events = responses_stream(openai_response(function_call("get_order_details", GOOD)))
        body, last = responses_body(stream=True), b"event: response.completed"
    else:
        events = chat_events(tool_call_completion("get_order_details", GOOD))
        body, last = chat_body(stream=True), b"data: [DONE]"
    client = await sse_proxy(events)  # each event its own write: the call in many pieces
    response = await client.post(f"/v1/{route}", json=body)
    text = await response.text()
    assert response.status == 200, text[:300]
    kind, closing = writes[-1]
    assert kind == "end" and last in closing and b"get_order_details" in closing
    # Nothing of the call was written before: at most chat's role chunk went out.
    assert all(b"get_order_details" not in data for kind, data in writes[:-1])
    assert len(writes) <= 2
    if route == "chat/completions":
        arguments = "".join(c["function"]["arguments"] for _, d in parse_sse(text)[:-1]
                            for choice in d.get("choices", [])
                            for c in choice["delta"].get("tool_calls", []))
    elif route == "messages":
        arguments = "".join(d["delta"]["partial_json"] for n, d in parse_sse(text)
                            if n == "content_block_delta")
    else:
        arguments = parse_sse(text)[-1][1]["response"]["output"][0]["arguments"]
    assert json.loads(arguments) == GOOD


@pytest.mark.parametrize("route", ["chat/completions", "messages", "responses"])
async def test_a_burst_of_text_that_writes_a_call_is_held_and_lifted(
        route: str, sse_proxy: Any, writes: list[tuple[str, bytes]]) -> None:  # noqa: F811
    if route == "messages":
        events = anthropic_stream(anthropic_message(text_block(WRITTEN_CALL)))
        body = messages_body(stream=True)
    elif route == "responses":
        events = responses_stream(openai_response(message_item(WRITTEN_CALL)))
        body = responses_body(stream=True)
    else:
        events = chat_events(text_completion(WRITTEN_CALL))
        body = chat_body(stream=True)
    client = await sse_proxy([b"".join(events)], tool_call_format="content")
    response = await client.post(f"/v1/{route}", json=body)
    text = await response.text()
    assert response.status == 200, text[:300]
    assert "```json" not in text  # no piece of the written call reached the agent as text
    assert "get_order_details" in writes[-1][1].decode() and writes[-1][0] == "end"
    assert "#W1234567" in text


# -- the line splitter --------------------------------------------------------------------


def test_lines_cut_anywhere_come_out_as_written() -> None:
    """Whatever the network's cuts, the lines are the body's (as bytes.split finds them)."""
    rng = random.Random(23)
    body = b"".join(b"event: e\ndata: " + b"x" * rng.randrange(0, 300) + b"\n\n"
                    for _ in range(200)) + b"data: tail"
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(body)), rng.randrange(1, 400)))
        splitter = SseLines(max_line=1000)
        lines: list[bytes] = []
        for start, stop in zip([0, *cuts], [*cuts, len(body)], strict=True):
            lines += splitter.feed(body[start:stop])
        assert splitter.fault is None
        assert [*lines, splitter.rest()] == body.split(b"\n")


def test_a_line_over_the_bound_stops_after_the_lines_before_it() -> None:
    splitter = SseLines(max_line=10)
    assert splitter.feed(b"ok\nalso ok\n" + b"y" * 11 + b"\nnever") == [b"ok", b"also ok"]
    assert isinstance(splitter.fault, StreamBroken)


def test_a_line_over_the_bound_across_reads_is_refused_without_growing() -> None:
    splitter = SseLines(max_line=10)
    assert splitter.feed(b"a\n123456") == [b"a"]
    assert splitter.feed(b"7890") == [] and splitter.fault is None
    assert splitter.feed(b"1") == [] and isinstance(splitter.fault, StreamBroken)
    assert len(splitter.pending) <= 10
    closing = SseLines(max_line=10)
    closing.feed(b"123456")
    assert closing.feed(b"78901\nz\n") == [] and isinstance(closing.fault, StreamBroken)


@pytest.mark.parametrize("opening", ["\n\n", "  ", "<", "<d"])
async def test_text_held_while_its_head_was_undecided_reaches_the_agent_byte_for_byte(
        opening: str, sse_proxy: Any) -> None:  # noqa: F811
    """Whitespace, or a `<` that might open `<tool_call>`, is held until a visible character
    rules out a call; then the held events are written as the upstream sent them (they
    were joined into one chunk of reflexguard's before)."""
    completion = text_completion("x")
    deltas = [opening, "iv>", " hello", " there"] if opening.startswith("<") \
        else [opening, "Hello", " there"]
    chunks = stream_chunks(completion, include_usage=False)
    head, tail = chunks[:1], chunks[-1:]
    middle = [{**chunks[1], "choices": [{**chunks[1]["choices"][0], "delta": {"content": d}}]}
              for d in deltas]
    events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in [*head, *middle, *tail]]
    client = await sse_proxy([*events, b"data: [DONE]\n\n"])  # each event its own write
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    body = await response.read()
    assert response.status == 200, body[:300]
    assert data_lines(body)[:1 + len(deltas)] == data_lines(b"".join(events[:1 + len(deltas)]))


async def test_text_that_stays_undecided_past_the_replay_bound_is_joined_as_before(
        sse_proxy: Any) -> None:  # noqa: F811
    """Past MAX_REPLAY_BYTES of held events the replay is dropped (the bound): the text
    still arrives whole, as one chunk of reflexguard's."""
    blank = " " * 8
    count = streams.MAX_REPLAY_BYTES // 150 + 10
    chunks = stream_chunks(text_completion(blank * count + "Hello"), include_usage=False)
    client = await sse_proxy([b"".join(b"data: " + json.dumps(c).encode() + b"\n\n"
                                       for c in chunks) + b"data: [DONE]\n\n"])
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    text = await response.text()
    contents = [c["delta"].get("content") or "" for _, d in parse_sse(text)[:-1]
                for c in d.get("choices", [])]
    assert "".join(contents) == blank * count + "Hello"
    assert len([c for c in contents if c]) == 1  # joined: one chunk


# -- the streamed clean answer ------------------------------------------------------------


def clean_stream(route: str) -> tuple[list[bytes], dict[str, Any]]:
    """A stream of text and one valid call, in the route's grammar, and its request body."""
    if route == "messages":
        message = anthropic_message(text_block("Looking it up."), *anthropic_call(
            "get_order_details", GOOD)["content"], stop="tool_use")
        return anthropic_stream(message), messages_body(stream=True)
    if route == "responses":
        response = openai_response(function_call("get_order_details", GOOD))
        return responses_stream(response), responses_body(stream=True)
    completion = tool_call_completion("get_order_details", GOOD, content="Looking it up.")
    return chat_events(completion), chat_body(stream=True)


def without_timing(line: str) -> dict[str, Any]:
    record = json.loads(line)
    return {k: v for k, v in record.items() if k not in ("request_id", "latency_ms", "ts")}


@pytest.mark.parametrize("route", ["chat/completions", "messages", "responses"])
async def test_a_clean_stream_is_answered_as_the_full_reading_answers_it(
        route: str, sse_proxy: Any, tmp_path: Any,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcut skips the reading into verdicts and the ladder for a stream whose calls
    are all ok: the agent's bytes and the attempt's record are those of the full reading."""
    import reflexguard.http.dialect_stream as dialect_stream
    import reflexguard.http.stream_clean as stream_clean

    events, body = clean_stream(route)
    taken: list[bool] = []

    def counted(*args: Any) -> Any:
        result = stream_clean.clean_first(*args)
        taken.append(result is not None)
        return result

    answers, records = [], []
    log = tmp_path / "events.jsonl"  # where sse_proxy has reflexguard write its events
    for shortcut in (True, False):
        chosen = counted if shortcut else (lambda *args: None)
        monkeypatch.setattr(streams, "clean_first", chosen)
        monkeypatch.setattr(dialect_stream, "clean_first", chosen)
        client = await sse_proxy(events)
        response = await client.post(f"/v1/{route}", json=body)
        answers.append(await response.read())
        assert response.status == 200, answers[-1][:300]
        records.append([without_timing(line) for line in log.read_text().splitlines()])
        log.write_text("")
    assert taken == [True]
    assert answers[0] == answers[1]
    assert records[0] == records[1] and records[0], records
