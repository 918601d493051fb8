"""An upstream answer is bounded (issue 30, item 2): a non-streamed answer, however it is
framed, and a guarded stream in total stop at `max_answer_bytes`; the agent gets a 502 (or
the dialect's error event once streaming), the upstream request is closed, and it is
counted. Memory is not measured here (no timed or sized assertion): the upstream's
`stopped` counter proves reflexguard hung up instead of reading on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from reflexguard.http.app import build_app
from reflexguard.ops.config import Settings
from tests.conftest import chat_body
from tests.fakes.hostile_upstream import HostileUpstream
from tests.http.dialect_fixtures import messages_body, responses_body

LIMIT = 1024 * 1024  # a small bound, so the test reads megabytes, not gigabytes


@pytest.fixture
async def hostile(tmp_path: Any) -> AsyncIterator[Callable[..., Any]]:
    """`await hostile(mode, **settings)`: (a TestClient for reflexguard, the upstream)."""
    servers: list[Any] = []

    async def make(mode: str, **settings: Any) -> tuple[TestClient[Any, Any], HostileUpstream]:
        upstream = HostileUpstream(mode=mode)  # type: ignore[arg-type]
        server = TestServer(upstream.app())
        await server.start_server()
        servers.append(server)
        settings.setdefault("upstream", str(server.make_url("/v1")))
        settings.setdefault("events", tmp_path / "events.jsonl")
        settings.setdefault("max_answer_bytes", LIMIT)
        client: TestClient[Any, Any] = TestClient(TestServer(build_app(Settings(**settings))))
        await client.start_server()
        servers.append(client)
        return client, upstream

    yield make
    for server in reversed(servers):
        await server.close()


async def hung_up(upstream: HostileUpstream) -> bool:
    for _ in range(100):  # the upstream's handler sees the hang-up a moment later
        if upstream.stopped:
            return True
        await asyncio.sleep(0.05)
    return False


async def too_large_count(client: TestClient[Any, Any]) -> str:
    text = await (await client.get("/metrics")).text()
    return "\n".join(line for line in text.splitlines() if "answer_too_large" in line)


BODIES = {"/v1/chat/completions": chat_body, "/v1/messages": messages_body,
          "/v1/responses": responses_body}


@pytest.mark.parametrize("mode", ["endless_json", "huge_length"])
@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize("tools", [True, False])
async def test_an_endless_answer_is_a_502_and_the_upstream_request_is_closed(
        hostile: Any, mode: str, path: str, tools: bool) -> None:
    client, upstream = await hostile(mode)
    body = BODIES[path]()
    if not tools:
        body.pop("tools")
    response = await client.post(path, json=body)
    answer = await response.json()
    assert response.status == 502, answer
    message = json.dumps(answer)
    assert "max_answer_bytes" in message
    if path == "/v1/messages":  # every failure there in Anthropic's format
        assert answer["type"] == "error" and answer["error"]["type"], answer
    else:
        assert set(answer["error"]) >= {"message", "type", "code"}, answer
    assert await hung_up(upstream)
    assert "upstream_answer_too_large" in await too_large_count(client)


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize("dialects", [["chat", "messages", "responses"], ["chat"]])
async def test_an_endless_guarded_stream_ends_in_the_dialects_error(
        hostile: Any, path: str, dialects: list[str]) -> None:
    client, upstream = await hostile("endless_stream", upstream_dialects=dialects)
    response = await client.post(path, json=BODIES[path](stream=True))
    text = await response.text()
    # The call is held, so nothing went out before the bound: a status, in the route's
    # format; a stream that had started would end in its error event instead.
    assert response.status == 502, text[:300]
    assert "max_answer_bytes" in text
    if path == "/v1/messages":
        assert json.loads(text)["type"] == "error"
    assert await hung_up(upstream)
    assert "upstream_answer_too_large" in await too_large_count(client)


async def test_a_started_stream_past_the_bound_ends_with_an_error_event(hostile: Any) -> None:
    """Text goes out as it comes; past the bound the stream ends in an error event and
    [DONE], never a second response."""
    client, upstream = await hostile("cr_stream")
    text_chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1,
                  "model": "simulated-hostile",
                  "choices": [{"index": 0, "delta": {"content": "Hello " * 2000},
                               "finish_reason": None}]}
    upstream.events = [f"data: {json.dumps(text_chunk)}\n\n".encode()] * 200  # ~2.4 MB
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    text = await response.text()
    assert response.status == 200
    assert "Hello" in text and "max_answer_bytes" in text
    assert text.rstrip().endswith("data: [DONE]")


async def test_an_answer_within_the_bound_is_untouched(hostile: Any) -> None:
    client, upstream = await hostile("echo")
    upstream.answer = {"id": "simulated", "object": "chat.completion", "created": 1,
                       "model": "simulated", "choices": [{"index": 0, "message": {
                           "role": "assistant", "content": "x" * (LIMIT // 2)},
                           "finish_reason": "stop"}]}
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status == 200
    assert (await response.json())["choices"][0]["message"]["content"] == "x" * (LIMIT // 2)
