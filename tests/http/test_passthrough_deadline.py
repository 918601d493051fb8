"""`request_timeout` bounds every request, tools or not (issue 30, item 4): a slow
non-streamed pass-through gets a 504 in its route's format, and a pass-through stream that
only sends keep-alive comments is ended with the route's error event, on every route,
native and translated. The upstream request is closed (its handler sees the hang-up)."""

from __future__ import annotations

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
from tests.http.test_answer_bounds import hung_up

TIMEOUT = 1.0  # the request deadline under test; the upstream's own timeout is 60 s
BODIES = {"/v1/chat/completions": chat_body, "/v1/messages": messages_body,
          "/v1/responses": responses_body}


@pytest.fixture
async def slow(tmp_path: Any) -> AsyncIterator[Callable[..., Any]]:
    servers: list[Any] = []

    async def make(mode: str, dialects: list[str]) -> tuple[TestClient[Any, Any],
                                                           HostileUpstream]:
        upstream = HostileUpstream(mode=mode, delay=30.0)  # type: ignore[arg-type]
        server = TestServer(upstream.app())
        await server.start_server()
        settings = Settings(upstream=str(server.make_url("/v1")), events=tmp_path / "e.jsonl",
                            request_timeout=TIMEOUT, upstream_timeout=60,
                            upstream_dialects=dialects)
        client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
        await client.start_server()
        servers.extend([server, client])
        return client, upstream

    yield make
    for server in reversed(servers):
        await server.close()


def without_tools(path: str, stream: bool) -> dict[str, Any]:
    body = BODIES[path](stream=stream)
    body.pop("tools")
    return body


NATIVE = ["chat", "messages", "responses"]


@pytest.mark.parametrize("path", [*BODIES, "/v1/completions"])
@pytest.mark.parametrize("dialects", [NATIVE, ["chat"]])
async def test_a_slow_pass_through_answer_is_a_504_at_the_deadline(
        slow: Any, path: str, dialects: list[str]) -> None:
    client, _ = await slow("slow_json", dialects)
    body = without_tools(path, False) if path in BODIES else {"model": "m", "prompt": "hi"}
    response = await client.post(path, json=body)
    answer = await response.json()
    assert response.status == 504, answer
    assert "request_timeout" in json.dumps(answer) or "deadline" in json.dumps(answer)
    if path == "/v1/messages":
        assert answer["type"] == "error", answer
    else:
        assert "message" in answer["error"], answer
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_fallbacks_total{kind="request_deadline"}' in metrics


@pytest.mark.parametrize("path", [*BODIES, "/v1/completions"])
@pytest.mark.parametrize("dialects", [NATIVE, ["chat"]])
async def test_a_pass_through_stream_of_comments_ends_at_the_deadline(
        slow: Any, path: str, dialects: list[str]) -> None:
    client, upstream = await slow("comments", dialects)
    body = without_tools(path, True) if path in BODIES else {"model": "m", "prompt": "hi",
                                                             "stream": True}
    response = await client.post(path, json=body)
    text = await response.text()
    if response.status == 504:  # nothing went out before the deadline (translated)
        assert "request_timeout" in text
    else:
        assert response.status == 200, text[:300]
        assert "request_timeout" in text, text[-300:]
        if path == "/v1/messages":
            assert "event: error" in text
        elif path == "/v1/responses":
            assert "event: error" in text or '"type":"error"' in text
        else:
            assert text.rstrip().endswith("data: [DONE]"), text[-300:]
    assert await hung_up(upstream)
