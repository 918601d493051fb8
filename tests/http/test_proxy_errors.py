"""Every row of the bad-input and fault table: an OpenAI-format error, never a traceback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from reflexguard.http.app import build_app
from reflexguard.ops.config import Settings
from reflexguard.ops.loopback import free_port
from tests.conftest import TOOLS, chat_body
from tests.fakes.fake_upstream import Scripted, text_completion


def assert_openai_error(answer: dict[str, Any]) -> None:
    assert set(answer) == {"error"}
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in answer["error"]["message"]


async def raw_post(client: Any, data: bytes) -> tuple[int, dict[str, Any]]:
    response = await client.post("/v1/chat/completions", data=data,
                                 headers={"Content-Type": "application/json"})
    return response.status, await response.json()


@pytest.mark.parametrize("data", [b"{not json", b"[1, 2]", b'{"model": "m"}',
                                  b'{"messages": "hi"}', b'{"messages": []}',
                                  b'{"messages": [{"content": "no role"}]}',
                                  b'{"messages": [{"role": "user"}], "tools": {"a": 1}}'])
async def test_bad_bodies_are_400(fake, proxy, data: bytes):
    upstream, _ = fake
    status, answer = await raw_post(await proxy(), data)
    assert status == 400
    assert_openai_error(answer)
    assert upstream.calls == 0


async def test_invalid_tool_schema_is_400_naming_the_tool(fake, proxy):
    bad = {"type": "function", "function": {"name": "broken_tool",
                                            "parameters": {"type": "objekt"}}}
    body = chat_body(tools=[*TOOLS, bad])
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=body)
    answer = await response.json()
    assert response.status == 400
    assert_openai_error(answer)
    assert "broken_tool" in answer["error"]["message"]
    assert answer["error"]["param"] == "tools[2].function.parameters"


async def test_remote_refs_are_refused_not_fetched(fake, proxy):
    remote = {"type": "function", "function": {"name": "r", "parameters": {
        "$ref": "http://127.0.0.1:9/schema.json"}}}
    response = await (await proxy()).post("/v1/chat/completions",
                                          json=chat_body(tools=[remote]))
    assert response.status == 400


async def test_oversized_body_is_413(fake, proxy):
    client = await proxy(max_body_bytes=2048)
    status, answer = await raw_post(client, b'{"messages": "' + b"x" * 4096 + b'"}')
    assert status == 413
    assert_openai_error(answer)


async def test_unreachable_upstream_is_502(proxy):
    client = await proxy(upstream=f"http://127.0.0.1:{free_port()}/v1")
    for stream in (False, True):
        response = await client.post("/v1/chat/completions", json=chat_body(stream=stream))
        assert response.status == 502
        assert_openai_error(await response.json())


async def test_upstream_timeout_is_504(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(delay=1.0)
    client = await proxy(upstream_timeout=0.2)
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status == 504
    assert_openai_error(await response.json())


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
async def test_upstream_http_errors_pass_on(fake, proxy, status: int):
    upstream, _ = fake
    body = b'{"error": {"message": "from upstream", "type": "x", "param": null, "code": null}}'
    upstream.default = Scripted(status=status, body=body)
    client = await proxy()
    for stream in (False, True):
        response = await client.post("/v1/chat/completions", json=chat_body(stream=stream))
        assert response.status == status
        assert await response.read() == body


async def test_upstream_stream_cut_off_ends_with_an_error_event(fake, proxy):
    upstream, _ = fake
    from tests.fakes.fake_upstream import tool_call_completion

    upstream.default = Scripted(tool_call_completion("cancel_order", {"order_id": "1"}),
                                cut_stream_after=3)
    client = await proxy()
    for with_tools in (True, False):
        body = chat_body(stream=True)
        if not with_tools:
            del body["tools"]
        response = await client.post("/v1/chat/completions", json=body)
        text = await response.text()
        assert response.status == 200
        events = [line for line in text.split("\n\n") if line.strip()]
        # A chat stream that fails ends with its error chunk, then [DONE] (issue 18).
        assert '"error"' in events[-2] and events[-1] == "data: [DONE]", text


async def test_unknown_route_and_method_are_openai_errors(fake, proxy):
    client = await proxy()
    missing = await client.get("/nope")
    assert missing.status == 404
    assert_openai_error(await missing.json())
    wrong = await client.get("/v1/chat/completions")
    assert wrong.status in (404, 405)


async def test_models_and_other_routes_pass_through(fake, proxy):
    client = await proxy()
    models = await (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "fake-upstream"
    health = await client.get("/healthz")
    assert (await health.json())["status"] == "ok"


async def test_other_routes_stream_through(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(text_completion("streamed words"))
    client = await proxy()
    response = await client.post("/v1/completions", json={"prompt": "x", "stream": True,
                                                         "messages": []})
    text = await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert text.rstrip().endswith("data: [DONE]") and "streamed" in text


async def test_server_survives_a_burst_of_garbage(fake, proxy):
    client: TestClient[Any, Any] = await proxy()
    bodies = [b"", b"null", b"\xff\xfe", b'{"messages": [null]}'] * 10
    results = await asyncio.gather(*(raw_post(client, b) for b in bodies))
    assert {status for status, _ in results} == {400}


def test_build_app_requires_an_upstream():
    with pytest.raises(ValueError):
        build_app(Settings())
