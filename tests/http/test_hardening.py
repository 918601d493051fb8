"""Regression tests for the adversarial run (issue 7): each fails on the code before it.

A fake upstream sits behind a real loopback socket; where the wire format itself is
the point (chunked bodies, disconnects), a real HTTP client reads it.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.conftest import TOOLS, chat_body
from tests.fakes.fake_upstream import Scripted, text_completion, tool_call_completion
from tests.http.test_proxy_errors import assert_openai_error

PYTHON_RECORDS = "Here are your orders: [{'id': 'W123', 'status': 'pending'}]"


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def streamed_content(sse_text: str) -> str:
    """The text deltas of a chat-completion stream, joined."""
    parts = []
    for event in sse_text.split("\n\n"):
        payload = event.strip().removeprefix("data: ")
        if not payload or payload == "[DONE]":
            continue
        for choice in orjson.loads(payload).get("choices", []):
            parts.append(choice.get("delta", {}).get("content") or "")
    return "".join(parts)


async def metrics_of(client: Any) -> str:
    return str(await (await client.get("/metrics")).text())


# -- untrusted model text never wedges the loop ------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_text_listing_records_in_python_notation_is_answered(fake, proxy, stream):
    upstream, _ = fake
    upstream.default = Scripted(text_completion(PYTHON_RECORDS))
    client = await proxy()
    response = await asyncio.wait_for(
        client.post("/v1/chat/completions", json=chat_body(stream=stream)), timeout=10)
    text = await response.text()
    assert response.status == 200
    assert streamed_content(text) == PYTHON_RECORDS if stream else "W123" in text
    health = await asyncio.wait_for(client.get("/healthz"), timeout=2)
    assert health.status == 200


async def test_content_format_lifts_nothing_from_python_records(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(text_completion(PYTHON_RECORDS))
    client = await proxy(tool_call_format="content")
    response = await asyncio.wait_for(
        client.post("/v1/chat/completions", json=chat_body()), timeout=10)
    answer = await response.json()
    assert answer["choices"][0]["message"]["content"] == PYTHON_RECORDS


# -- no request can make the proxy open a connection --------------------------------------


@pytest.fixture
async def canary() -> AsyncIterator[tuple[int, list[int]]]:
    """A listener that counts the connections it receives; it must receive none."""
    accepted: list[int] = []

    async def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, accepted
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("keyword", ["$schema", "$ref", "$id+$ref", "$dynamicRef", "nested"])
async def test_schema_keywords_that_could_fetch_are_refused(fake, proxy, canary, keyword):
    upstream, _ = fake
    port, accepted = canary
    url = f"http://127.0.0.1:{port}/meta"
    schemas = {
        "$schema": {"$schema": url, "type": "object"},
        "$ref": {"$ref": url},
        "$id+$ref": {"$id": url, "type": "object",
                     "properties": {"a": {"$ref": "other.json"}}},
        "$dynamicRef": {"$dynamicRef": url},
        "nested": {"type": "object", "properties": {"a": {"$ref": url + "#/x"}}},
    }
    tool = {"type": "function", "function": {"name": "fetchy", "parameters": schemas[keyword]}}
    client = await proxy()
    started = time.monotonic()
    response = await client.post("/v1/chat/completions", json=chat_body(tools=[*TOOLS, tool]))
    answer = await response.json()
    assert response.status == 400, answer
    assert_openai_error(answer)
    assert "fetchy" in answer["error"]["message"]
    assert time.monotonic() - started < 2
    await asyncio.sleep(0.05)
    assert accepted == []
    assert upstream.calls == 0


@pytest.mark.parametrize("uri", [
    "https://json-schema.org/draft/2020-12/schema",
    "http://json-schema.org/draft/2020-12/schema#",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-04/schema",
])
async def test_well_known_metaschemas_are_accepted_locally(fake, proxy, uri):
    upstream, _ = fake
    upstream.default = Scripted(tool_call_completion("cc_tool", {"command": "ls"}))
    tool = {"type": "function", "function": {"name": "cc_tool", "parameters": {
        "$schema": uri, "type": "object", "properties": {"command": {"type": "string"}},
        "required": ["command"], "additionalProperties": False}}}
    response = await (await proxy()).post("/v1/chat/completions", json=chat_body(tools=[tool]))
    assert response.status == 200, await response.text()
    assert upstream.calls == 1  # valid: no re-ask


# -- once a stream has started, failures are events, never a second response -----------


@pytest.fixture
async def slow_stream_upstream() -> AsyncIterator[TestServer]:
    """Streams a text delta, then stalls: the stream has started and will not finish."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"role": "assistant",
                                                    "content": "Hello there"},
                              "finish_reason": None}]}
        await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await asyncio.sleep(30)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = TestServer(app)
    await server.start_server()
    yield server
    await server.close()


async def test_a_failure_after_headers_is_an_error_event_and_a_clean_end(
        proxy, slow_stream_upstream):
    client = await proxy(upstream=str(slow_stream_upstream.make_url("/v1")),
                         request_timeout=0.5)
    url = str(client.make_url("/v1/chat/completions"))
    async with httpx.AsyncClient(timeout=10) as http, http.stream(
            "POST", url, json=chat_body(stream=True)) as response:
        assert response.status_code == 200
        body = b"".join([part async for part in response.aiter_bytes()])
    events = [e for e in body.decode().split("\n\n") if e.strip()]
    assert "Hello there" in events[0]
    assert events[-1] == "data: [DONE]"  # the error chunk, then [DONE] (issue 18)
    last = orjson.loads(events[-2].removeprefix("data: "))
    assert last["error"]["code"] == "upstream_timeout"
    assert b"HTTP/1.1" not in body


async def test_request_deadline_is_a_504_before_the_stream_starts(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(delay=5.0)
    client = await proxy(request_timeout=0.3)
    for stream in (False, True):
        started = time.monotonic()
        response = await client.post("/v1/chat/completions", json=chat_body(stream=stream))
        assert response.status == 504
        assert_openai_error(await response.json())
        assert time.monotonic() - started < 3


@pytest.mark.parametrize(("upstream_timeout", "request_timeout", "deadline_counted"),
                         [(0.3, 30.0, 0), (30.0, 0.3, 1)])
async def test_the_first_answers_timeout_says_which_limit_fell(
        fake, proxy, upstream_timeout: float, request_timeout: float,
        deadline_counted: int) -> None:
    """The first answer waits under one timer, the nearer of upstream_timeout and the
    request's deadline; a 504 either way, counted as request_deadline only for the latter."""
    upstream, _ = fake
    upstream.default = Scripted(delay=3.0)
    client = await proxy(upstream_timeout=upstream_timeout, request_timeout=request_timeout)
    started = time.monotonic()
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status == 504
    assert_openai_error(await response.json())
    assert time.monotonic() - started < 2.5
    assert metric(await metrics_of(client), "reflexguard_fallbacks_total",
                  kind="request_deadline") == deadline_counted


async def test_request_deadline_during_repair_returns_the_first_answer(fake, proxy):
    upstream, _ = fake
    bad = tool_call_completion("cancel_ordr", {"order_id": "1"})
    upstream.script = [Scripted(bad), Scripted(delay=5.0)]
    client = await proxy(request_timeout=0.5)
    response = await client.post("/v1/chat/completions", json=chat_body())
    answer = await response.json()
    assert response.status == 200
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "cancel_ordr"
    assert metric(await metrics_of(client), "reflexguard_fallbacks_total",
                  kind="request_deadline") == 1


# -- client-triggerable faults are 4xx, never 500 ----------------------------------------


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


async def test_deeply_nested_request_is_400(fake, proxy):
    upstream, _ = fake
    client = await proxy()
    for stream in (False, True):
        body = chat_body(stream=stream, metadata=nested(300))
        # orjson writes at most 254 levels; the stdlib writes what it is given.
        response = await client.post("/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        answer = await response.json()
        assert response.status == 400
        assert_openai_error(answer)
        assert answer["error"]["code"] == "nesting_too_deep"
    assert upstream.calls == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_deeply_nested_upstream_arguments_are_not_a_500(fake, proxy, stream):
    upstream, _ = fake
    deep = tool_call_completion("cancel_order", "{}")
    deep["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = nested(900)
    upstream.default = Scripted(deep)
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=chat_body(stream=stream))
    assert response.status in (200, 502), await response.text()
    if response.status != 200:
        assert_openai_error(await response.json())


async def test_invalid_gzip_body_is_400_and_keeps_the_connection_usable(fake, proxy):
    client = await proxy()
    bad = await client.post("/v1/chat/completions", data=b"\x1f\x8bnot gzip at all",
                            headers={"Content-Encoding": "gzip",
                                     "Content-Type": "application/json"})
    assert bad.status == 400
    assert_openai_error(await bad.json())
    good = await client.post("/v1/chat/completions", data=gzip.compress(
        orjson.dumps(chat_body())), headers={"Content-Encoding": "gzip",
                                             "Content-Type": "application/json"})
    assert good.status == 200


async def test_non_utf8_session_header_is_served(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(tool_call_completion("cancel_ordr", {"order_id": "1"}))
    client = await proxy()
    url = str(client.make_url("/v1/chat/completions"))
    async with httpx.AsyncClient() as http:
        response = await http.post(url, content=orjson.dumps(chat_body()), headers={
            "content-type": "application/json", "x-reflexguard-session": b"s\xff\xfe1"})
    assert response.status_code == 200, response.text


async def test_stream_flag_must_be_a_boolean(fake, proxy):
    upstream, _ = fake
    response = await (await proxy()).post("/v1/chat/completions",
                                          json=chat_body(stream="true"))
    assert response.status == 400
    assert (await response.json())["error"]["param"] == "stream"
    assert upstream.calls == 0


async def test_duplicate_tool_names_are_400(fake, proxy):
    response = await (await proxy()).post("/v1/chat/completions",
                                          json=chat_body(tools=[*TOOLS, TOOLS[0]]))
    answer = await response.json()
    assert response.status == 400
    assert "get_order_details" in answer["error"]["message"]


# -- bounded work on untrusted text ---------------------------------------------------------


async def test_quadratic_whitespace_in_model_output_does_not_block_the_loop(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(text_completion("{<tool_call>x" + "\n" * 20_000 + "y"))
    client = await proxy(tool_call_format="content")
    started = time.monotonic()
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status == 200
    assert time.monotonic() - started < 1.0


# -- pass-through stays below /v1 ------------------------------------------------------------


@pytest.fixture
async def path_recorder() -> AsyncIterator[tuple[TestServer, list[str]]]:
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = TestServer(app)
    await server.start_server()
    yield server, seen
    await server.close()


async def raw_get(port: int, path: str) -> int:
    """GET `path` exactly as written: HTTP clients normalise `..` away before sending."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    return int(status_line.split()[1])


@pytest.mark.parametrize("path", [
    "/v1/../../etc/passwd", "/v1/%2e%2e/%2e%2e/etc/passwd", "/v1/%2e%2e/",
    "/v1/..%2f..%2fadmin", "/v1/%252e%252e/admin", "/v1/models%3Fx=1", "/v1/a/../../admin",
    "/v1/%2E%2E/admin", "/v1/..\\admin", "/v1/%5c..%5cadmin", "/v1/%00admin",
    "/v1/.%2e/admin", "/v1/%25%32%65%25%32%65/admin", "/v1/./../admin",
])
async def test_paths_that_escape_v1_are_400_and_never_reach_the_upstream(
        proxy, path_recorder, path):
    server, seen = path_recorder
    client = await proxy(upstream=str(server.make_url("/v1")))
    status = await raw_get(client.port, path)
    assert status in (400, 404)  # 404: the server's router already refused it
    assert seen == []


async def test_plain_subpaths_and_queries_still_pass_through(proxy, path_recorder):
    server, seen = path_recorder
    client = await proxy(upstream=str(server.make_url("/v1")))
    response = await client.get("/v1/models/some-model?verbose=1")
    assert response.status == 200
    assert seen == ["/v1/models/some-model?verbose=1"]


# -- a client that hangs up stops the work and is counted as such --------------------------


async def test_client_disconnect_mid_stream_is_counted_as_a_disconnect(
        proxy, slow_stream_upstream):
    client = await proxy(upstream=str(slow_stream_upstream.make_url("/v1")))
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    await response.content.readany()
    response.close()
    text = ""
    for _ in range(50):
        await asyncio.sleep(0.05)
        text = await metrics_of(client)
        if metric(text, "reflexguard_fallbacks_total", kind="client_disconnected"):
            break
    assert metric(text, "reflexguard_fallbacks_total", kind="client_disconnected") == 1
    assert metric(text, "reflexguard_fallbacks_total", kind="upstream_stream_cut") == 0


async def test_client_disconnect_stops_the_repair_ladder(fake, proxy):
    upstream, _ = fake
    bad = tool_call_completion("cancel_ordr", {"order_id": "1"})
    upstream.script = [Scripted(bad), Scripted(bad, delay=0.6), Scripted(bad, delay=0.6)]
    client = await proxy(max_repairs=2)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(client.post("/v1/chat/completions", json=chat_body()), 0.3)
    await asyncio.sleep(1.5)
    assert upstream.calls == 2  # the first answer and the re-ask in flight, no third
    text = await metrics_of(client)
    assert metric(text, "reflexguard_fallbacks_total", kind="client_disconnected") == 1
    assert metric(text, "reflexguard_repairs_total", outcome="fixed_by_reask") == 0


# -- strings from requests are bounded where they are repeated ------------------------------


async def test_huge_model_and_user_strings_are_clipped_in_metrics_and_events(
        fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.default = Scripted(tool_call_completion("cancel_ordr", {"order_id": "1"}))
    events = tmp_path / "events.jsonl"
    client = await proxy(events=events, repair=False)
    # The fake upstream (aiohttp) takes bodies up to 1 MiB.
    huge = "m" * 400_000
    response = await client.post("/v1/chat/completions",
                                 json=chat_body(model=huge, user="u" * 400_000))
    assert response.status == 200
    text = await metrics_of(client)
    assert len(text) < 20_000
    assert max(len(line) for line in events.read_text().splitlines()) < 5_000


# -- exposure ------------------------------------------------------------------------------


async def test_credentials_in_the_upstream_url_are_not_shown(fake, proxy):
    _, server = fake
    url = str(server.make_url("/v1")).replace("http://", "http://user:s3cret@")
    health = await (await (await proxy(upstream=url)).get("/healthz")).json()
    assert "s3cret" not in orjson.dumps(health).decode()
    assert health["upstream"].startswith("http://127.0.0.1:")


async def test_admin_token_guards_metrics_and_sessions(fake, proxy):
    client = await proxy(admin_token="t0ken")
    for path in ("/metrics", "/reflexguard/sessions/x"):
        denied = await client.get(path)
        assert denied.status == 401
        assert_openai_error(await denied.json())
        allowed = await client.get(path, headers={"Authorization": "Bearer t0ken"})
        assert allowed.status in (200, 404)
    assert (await client.get("/healthz")).status == 200


@pytest.mark.parametrize("body", [b"<html><body>502 Bad Gateway</body></html>", b""])
async def test_non_json_upstream_errors_become_openai_errors(fake, proxy, body):
    upstream, _ = fake
    upstream.default = Scripted(status=502, body=body)
    client = await proxy()
    for stream in (False, True):
        response = await client.post("/v1/chat/completions", json=chat_body(stream=stream))
        assert response.status == 502
        assert_openai_error(await response.json())


@asynccontextmanager
async def raw_sse_upstream(body: bytes) -> AsyncIterator[str]:
    """An upstream whose every chat completion is a 200 event stream carrying `body`."""

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(body)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("/v1"))
    finally:
        await server.close()


async def test_a_garbage_stream_is_a_502_like_its_non_stream_twin(proxy):
    async with raw_sse_upstream(
            b"data: this is not json\n\ndata: [1, 2]\n\ndata: [DONE]\n\n") as url:
        client = await proxy(upstream=url)
        response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
        assert response.status == 502
        assert_openai_error(await response.json())


# -- found by the fuzz suite ----------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress"])
async def test_unsupported_content_encodings_are_openai_errors(fake, proxy, encoding):
    response = await (await proxy()).post(
        "/v1/chat/completions", data=b"\x00\x01",
        headers={"Content-Encoding": encoding, "Content-Type": "application/json"})
    assert response.status == 415
    assert_openai_error(await response.json())


async def test_deflate_bodies_decode_and_bombs_are_413(fake, proxy):
    import zlib

    client = await proxy(max_body_bytes=64 * 1024)
    good = await client.post("/v1/chat/completions", data=zlib.compress(
        orjson.dumps(chat_body())), headers={"Content-Encoding": "deflate",
                                             "Content-Type": "application/json"})
    assert good.status == 200
    bomb = gzip.compress(b" " * 10_000_000)
    assert len(bomb) < 64 * 1024
    response = await client.post("/v1/chat/completions", data=bomb, headers={
        "Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert response.status == 413
    assert_openai_error(await response.json())


async def test_an_sse_line_over_aiohttps_limit_is_a_502(proxy):
    async with raw_sse_upstream(b"data: " + b"x" * 600_000) as url:
        client = await proxy(upstream=url)
        response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
        assert response.status == 502
        assert_openai_error(await response.json())


async def test_credentials_in_the_url_are_sent_as_basic_auth_beside_a_client_header(
        fake, proxy):
    upstream, server = fake
    url = str(server.make_url("/v1")).replace("http://", "http://user:pw@")
    client = await proxy(upstream=url)
    response = await client.post("/v1/chat/completions", json=chat_body(),
                                 headers={"Authorization": "Bearer sk-client"})
    assert response.status == 200
    assert upstream.headers[-1]["Authorization"].startswith("Basic ")


@pytest.mark.parametrize("body", [b'{"error": "flat string"}', b'{"error": {"message": "x"}}',
                                  b'{"error": {"message": "x", "code": 7}, "extra": 1}'])
async def test_partly_openai_upstream_errors_are_completed(fake, proxy, body):
    upstream, _ = fake
    upstream.default = Scripted(status=429, body=body)
    response = await (await proxy()).post("/v1/chat/completions", json=chat_body())
    assert response.status == 429
    answer = await response.json()
    assert_openai_error(answer)
    assert answer["error"]["message"] in ("flat string", "x")


async def test_dialect_streams_read_upstream_chunks_as_carefully_as_chat(proxy):
    """Messages translated to a chat upstream go through the same SSE reader: a non-object
    chunk is counted, a chunk nested past the limit ends the stream as broken."""
    deep = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": nested(150),
            "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}
    body = b"data: [1, 2]\n\ndata: " + json.dumps(deep).encode() + b"\n\n"
    async with raw_sse_upstream(body) as url:
        client = await proxy(upstream=url, upstream_dialects=["chat"])
        response = await client.post("/v1/messages", json={
            "model": "m", "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "t", "input_schema": {"type": "object"}}]})
        assert response.status == 502, await response.text()
        answer = await response.json()
        assert answer["type"] == "error"
        assert "nests deeper" in answer["error"]["message"]
        text = await metrics_of(client)
        assert metric(text, "reflexguard_fallbacks_total", kind="non_object_stream_chunk") == 1


async def test_the_upstream_sees_reflexguard_as_the_user_agent_not_aiohttps_or_the_agents(
        fake, proxy):
    upstream, _ = fake
    client = await proxy()
    for stream in (False, True):
        response = await client.post("/v1/chat/completions", json=chat_body(stream=stream),
                                     headers={"User-Agent": "agent/1.0"})
        assert response.status == 200
        await response.read()
        assert upstream.headers[-1]["User-Agent"] == "reflexguard"
