"""Native streams with nullable, odd-typed, missing and duplicated fields (issue 18, item 4):
read as the non-streamed parsers read them, never a 500; after the first byte, every
failure ends the stream in the dialect's own grammar.

The upstream is a scripted SSE server on a real loopback socket (SseUpstream); reflexguard
runs in front of it as served (build_app behind aiohttp's TestServer).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from reflexguard.http.app import build_app
from reflexguard.ops.config import Settings
from tests.fakes.native_replies import (
    anthropic_call,
    anthropic_stream,
    function_call,
    message_item,
    openai_response,
    responses_stream,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

Events = list[bytes]


@dataclass
class SseUpstream:
    """Answers every POST with `events` (each written as its own piece) when the request
    streams, else with `reply` as JSON. Labelled simulated in what it sends."""

    events: Events = field(default_factory=list)
    reply: dict[str, Any] = field(default_factory=dict)
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        if not body.get("stream"):
            return web.json_response(self.reply)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in self.events:
            await response.write(piece)
        await response.write_eof()
        return response

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app


@pytest.fixture
async def sse_proxy(tmp_path: Any) -> AsyncIterator[Callable[..., Any]]:
    """`await sse_proxy(events, **settings)`: a TestClient for reflexguard in front of an
    SseUpstream that streams `events`."""
    servers: list[Any] = []

    async def make(events: Events, reply: dict[str, Any] | None = None,
                   **settings: Any) -> TestClient[Any, Any]:
        upstream = SseUpstream(events, reply or {})
        server = TestServer(upstream.app())
        await server.start_server()
        servers.append(server)
        settings.setdefault("upstream", str(server.make_url("/v1")))
        settings.setdefault("events", tmp_path / "events.jsonl")
        client: TestClient[Any, Any] = TestClient(TestServer(build_app(Settings(**settings))))
        await client.start_server()
        servers.append(client)
        return client

    yield make
    for server in reversed(servers):
        await server.close()


def parse_sse(text: str) -> list[tuple[str | None, Any]]:
    """(event name, parsed data) for each event of a stream."""
    out: list[tuple[str | None, Any]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                payload = line[5:].strip()
                data = payload if payload == "[DONE]" else json.loads(payload)
        out.append((name, data))
    return out


def edit(events: Events, kind: str, change: Callable[[dict[str, Any]], None]) -> Events:
    """`events` with `change` applied to the data of every event of type `kind`."""
    out = []
    for raw in events:
        name, _, data = raw.decode().partition("\ndata: ")
        value = json.loads(data)
        if value.get("type") == kind:
            change(value)
            raw = f"{name}\ndata: {json.dumps(value)}\n\n".encode()
        out.append(raw)
    return out


def set_path(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            data = data.setdefault(key, {})
        if value is DELETE:
            data.pop(last, None)
        else:
            data[last] = value
    return change


DELETE = object()

# (label, event type, field path, value): each seen as a 500 or a broken stream on 20cb60d.
MESSAGES_VARIANTS = [
    ("usage.input_tokens null", "message_delta", "usage.input_tokens", None),
    ("usage.output_tokens string", "message_delta", "usage.output_tokens", "12"),
    ("usage.output_tokens word", "message_delta", "usage.output_tokens", "many"),
    ("usage null", "message_delta", "usage", None),
    ("start usage null", "message_start", "message.usage.output_tokens", None),
    ("index null", "content_block_start", "index", None),
    ("index string", "content_block_start", "index", "1"),
    ("index missing", "content_block_delta", "index", DELETE),
]
RESPONSES_VARIANTS = [
    ("usage.input_tokens null", "response.completed", "response.usage.input_tokens", None),
    ("usage.output_tokens string", "response.completed", "response.usage.output_tokens", "7"),
    ("output_index null", "response.output_item.added", "output_index", None),
    ("output_index string", "response.output_item.added", "output_index", "1"),
    ("output_index missing", "response.function_call_arguments.delta", "output_index", DELETE),
    # found by the fuzz suite: the completed response's output as the template of the reply
    ("response.output int", "response.completed", "response.output", 7),
]


def messages_events(text: bool) -> Events:
    return anthropic_stream(anthropic_call("get_order_details", GOOD,
                                           text="Looking that up." if text else None))


def responses_events(text: bool) -> Events:
    items = [message_item("Looking that up.")] if text else []
    return responses_stream(openai_response(*items, function_call("get_order_details", GOOD)))


def assert_messages_stream(text: str, *, ok: bool) -> list[tuple[str | None, Any]]:
    events = parse_sse(text)
    assert all(name is not None for name, _ in events), f"a line without an event name: {text}"
    names = [name for name, _ in events]
    if ok:
        assert names[-1] == "message_stop", names
        calls = [data["content_block"] for name, data in events
                 if name == "content_block_start"
                 and data["content_block"]["type"] == "tool_use"]
        assert [c["name"] for c in calls] == ["get_order_details"]
        deltas = [data for name, data in events if name == "message_delta"]
        assert all(isinstance(d["usage"]["output_tokens"], int) for d in deltas)
    return events


@pytest.mark.parametrize("text", [False, True], ids=["call-only", "text-then-call"])
@pytest.mark.parametrize(("label", "kind", "path", "value"), MESSAGES_VARIANTS,
                         ids=[v[0] for v in MESSAGES_VARIANTS])
async def test_messages_stream_with_an_odd_field_is_answered_whole(
        sse_proxy: Any, text: bool, label: str, kind: str, path: str, value: Any) -> None:
    events = edit(messages_events(text), kind, set_path(path, value))
    if kind.startswith("content_block") and text:  # the call's block, not the text's
        events = edit(messages_events(text), kind, lambda d: d.get("index") == 1 and set_path(
            path, value)(d))
    client = await sse_proxy(events)
    response = await client.post("/v1/messages", json=messages_body(stream=True))
    body = await response.text()
    assert response.status == 200, body
    assert_messages_stream(body, ok=True)


@pytest.mark.parametrize("text", [False, True], ids=["call-only", "text-then-call"])
@pytest.mark.parametrize(("label", "kind", "path", "value"), RESPONSES_VARIANTS,
                         ids=[v[0] for v in RESPONSES_VARIANTS])
async def test_responses_stream_with_an_odd_field_is_answered_whole(
        sse_proxy: Any, text: bool, label: str, kind: str, path: str, value: Any) -> None:
    events = edit(responses_events(text), kind, set_path(path, value))
    if kind != "response.completed" and text:  # the call's item (index 1), not the text's
        events = edit(responses_events(text), kind,
                      lambda d: d.get("output_index") == 1 and set_path(path, value)(d))
    client = await sse_proxy(events)
    response = await client.post("/v1/responses", json=responses_body(stream=True))
    body = await response.text()
    assert response.status == 200, body
    parsed = parse_sse(body)
    assert all(name is not None for name, _ in parsed), body
    assert parsed[-1][0] == "response.completed", [n for n, _ in parsed]
    final = parsed[-1][1]["response"]
    calls = [i for i in final["output"] if i["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["get_order_details"]
    assert isinstance(final["usage"]["input_tokens"], int)


async def test_a_fault_after_text_ends_a_messages_stream_with_its_error_event(
        sse_proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault of reflexguard's own once text is out: Anthropic's `error` event, never a
    chat-format `data: {"error": ...}` line."""
    import reflexguard.http.dialect_stream as dialect_stream

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("simulated fault")

    monkeypatch.setattr(dialect_stream, "read_attempt", broken)
    monkeypatch.setattr(dialect_stream, "clean_first", broken)  # the clean answer's way
    client = await sse_proxy(messages_events(text=True))
    response = await client.post("/v1/messages", json=messages_body(stream=True))
    body = await response.text()
    assert response.status == 200
    events = assert_messages_stream(body, ok=False)
    assert events[-1][0] == "error", body
    assert events[-1][1]["type"] == "error" and "message" in events[-1][1]["error"]


async def test_a_fault_after_text_ends_a_responses_stream_with_its_error_event(
        sse_proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import reflexguard.http.dialect_stream as dialect_stream

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("simulated fault")

    monkeypatch.setattr(dialect_stream, "read_attempt", broken)
    monkeypatch.setattr(dialect_stream, "clean_first", broken)  # the clean answer's way
    client = await sse_proxy(responses_events(text=True))
    response = await client.post("/v1/responses", json=responses_body(stream=True))
    body = await response.text()
    assert response.status == 200
    events = parse_sse(body)
    assert all(name is not None for name, _ in events), body
    assert events[-1][0] == "error", body
    numbers = [data["sequence_number"] for _, data in events]
    assert numbers == list(range(len(numbers))), "the error event is numbered in sequence"


async def test_a_fault_before_any_byte_is_the_dialects_500(
        sse_proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import reflexguard.http.dialect_stream as dialect_stream

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("simulated fault")

    monkeypatch.setattr(dialect_stream, "read_attempt", broken)
    monkeypatch.setattr(dialect_stream, "clean_first", broken)  # the clean answer's way
    client = await sse_proxy(messages_events(text=False))
    response = await client.post("/v1/messages", json=messages_body(stream=True))
    assert response.status == 500
    error = await response.json()
    assert error["type"] == "error" and error["error"]["type"] == "api_error"


async def test_a_cut_chat_stream_ends_with_an_error_chunk_then_done(sse_proxy: Any) -> None:
    from tests.conftest import chat_body

    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "Hello there, "},
                          "finish_reason": None}]}
    events = [b"data: " + json.dumps(chunk).encode() + b"\n\n"]  # then the stream just ends
    client = await sse_proxy(events)
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    body = await response.text()
    parsed = parse_sse(body)
    assert parsed[-1][1] == "[DONE]", body
    assert "error" in parsed[-2][1], body


async def test_a_fault_in_a_translated_stream_ends_it_in_the_messages_grammar(
        sse_proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Messages stream without tools to a chat-only upstream, failing once text is out:
    the error middleware ends it with Anthropic's `error` event, not a chat-format line."""
    from reflexguard.dialects.chat_stream import StreamAssembler

    def broken(_: Any) -> Any:
        raise RuntimeError("simulated fault")

    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "Hello there."},
                          "finish_reason": None}]}
    done = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in (chunk, done)]
    client = await sse_proxy([*events, b"data: [DONE]\n\n"], upstream_dialects=["chat"])
    monkeypatch.setattr(StreamAssembler, "completion", broken)
    body = messages_body(stream=True)
    del body["tools"]
    response = await client.post("/v1/messages", json=body)
    text = await response.text()
    assert response.status == 200
    events_out = assert_messages_stream(text, ok=False)
    assert events_out[-1][0] == "error", text
