"""Cancel what the client abandoned: when the agent hangs up, or the request's deadline
falls, the upstream request's connection is closed (so llama.cpp, vLLM and SGLang stop
generating) and counted.

The upstream here is a plain asyncio server on a real loopback socket that starts an
answer and never finishes it; it records the moment its connection is closed. The proxy
is served by a bare aiohttp AppRunner, as `web.run_app` or an embedding program would
serve it: the app itself must ask for handler cancellation.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from reflexguard.http.app import GUARD_KEY, build_app
from reflexguard.ops.config import Settings
from tests.conftest import chat_body
from tests.http.dialect_fixtures import messages_body

WAIT = 10.0  # seconds a test waits for what must happen at once: only a hang reaches it
CHAT_CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
              "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let"}}]}
MESSAGE_START = {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
    "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 1}}}


@dataclass
class HangingUpstream:
    """Answers every request with its head (and, for a stream, one event), then nothing:
    it records when the peer closes the connection."""

    received: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    server: asyncio.Server | None = None
    # Complete answers given before it starts hanging (the first answer of a ladder).
    answers: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        body = json.loads(await reader.readexactly(int(length.group(1)))) if length else {}
        self.bodies.append(body)
        if self.answers:
            payload = json.dumps(self.answers.pop(0)).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await writer.drain()
            # keep-alive: the proxy's pool may send its re-ask on this same connection
            return await self.handle(reader, writer)
        if body.get("stream"):
            event = (b"event: message_start\ndata: " + json.dumps(MESSAGE_START).encode()
                     if b"/messages" in head.split(b"\r\n")[0]
                     else b"data: " + json.dumps(CHAT_CHUNK).encode()) + b"\n\n"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n"
                         + f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await writer.drain()
        self.received.set()
        while await reader.read(65536):  # until the proxy closes this connection
            pass
        self.closed.set()
        writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def hanging() -> AsyncIterator[HangingUpstream]:
    upstream = HangingUpstream()
    yield upstream
    upstream.close()


async def serve(upstream: HangingUpstream, **settings: Any
                ) -> tuple[str, web.AppRunner, web.Application]:
    app = build_app(Settings(upstream=await upstream.start(), **settings))
    runner = web.AppRunner(app)  # aiohttp's defaults: no handler_cancellation asked here
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return f"http://127.0.0.1:{port}", runner, app


def fallbacks(app: web.Application, kind: str) -> float:
    value = app[GUARD_KEY].telemetry.fallbacks.labels(kind)._value.get()
    return float(value)


async def until(condition: Callable[[], bool]) -> None:
    """Wait (up to WAIT) for what the handler's own unwinding does after the close."""
    async with asyncio.timeout(WAIT):
        while not condition():
            await asyncio.sleep(0.01)


ROUTES = {"chat": ("/v1/chat/completions", chat_body),
          "messages": ("/v1/messages", messages_body)}


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
@pytest.mark.parametrize("dialect", sorted(ROUTES))
async def test_a_client_that_hangs_up_closes_the_upstream_request(hanging, dialect, stream):
    url, runner, app = await serve(hanging)
    path, body = ROUTES[dialect]
    try:
        async with aiohttp.ClientSession() as client:
            request = asyncio.ensure_future(client.post(url + path, json=body(stream=stream)))
            await asyncio.wait_for(hanging.received.wait(), WAIT)
            request.cancel()  # the agent gives up: its connection to the proxy closes
            with pytest.raises(asyncio.CancelledError):
                await request
        await asyncio.wait_for(hanging.closed.wait(), WAIT)
        await until(lambda: fallbacks(app, "client_disconnected") > 0)
        assert fallbacks(app, "client_disconnected") == 1
        assert fallbacks(app, "upstream_request_abandoned") == 1
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("dialect", sorted(ROUTES))
async def test_the_request_deadline_closes_the_upstream_request(hanging, dialect):
    url, runner, app = await serve(hanging, request_timeout=0.3)
    path, body = ROUTES[dialect]
    try:
        async with aiohttp.ClientSession() as client:
            response = await asyncio.wait_for(client.post(url + path, json=body()), WAIT)
            assert response.status == 504, await response.text()
        await asyncio.wait_for(hanging.closed.wait(), WAIT)
        assert fallbacks(app, "upstream_request_abandoned") == 1
    finally:
        await runner.cleanup()


async def test_a_deadline_during_a_re_ask_closes_it_and_returns_the_first_answer(hanging):
    from tests.fakes.fake_upstream import tool_call_completion

    first = tool_call_completion("get_order_details", {"order_id": "#W1234567"})
    hanging.answers = [first]  # a schema_violation; the re-ask then hangs
    url, runner, app = await serve(hanging, request_timeout=0.5)
    try:
        async with aiohttp.ClientSession() as client:
            response = await asyncio.wait_for(
                client.post(url + "/v1/chat/completions", json=chat_body()), WAIT)
            assert response.status == 200
            assert response.headers["x-reflexguard-chosen-attempt"] == "1"
            answer = await response.json()
        await asyncio.wait_for(hanging.closed.wait(), WAIT)
        # The first answer's 10 tokens and the re-ask floor of 256 (docs/repair.md).
        assert len(hanging.bodies) == 2 and hanging.bodies[1]["max_tokens"] == 266
        assert answer["choices"][0]["message"] == first["choices"][0]["message"]
        assert fallbacks(app, "upstream_request_abandoned") == 1
        assert fallbacks(app, "request_deadline") == 1
    finally:
        await runner.cleanup()
