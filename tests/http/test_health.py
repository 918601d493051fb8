"""/livez, /readyz and the unreachable upstream's log line and counter.

A real loopback fake upstream (tests/fakes/fake_upstream.py), or a port where nothing
listens, behind the real app.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from structlog.testing import capture_logs

from reflexguard.http.app import build_app
from reflexguard.http.health import LOG_EVERY, PROBE_TIMEOUT
from reflexguard.ops.config import Settings
from reflexguard.ops.loopback import free_port
from tests.conftest import chat_body
from tests.fakes.fake_upstream import FakeUpstream, Scripted

Client = TestClient[Any, Any]


@pytest.fixture
async def app_for() -> AsyncIterator[Callable[..., Any]]:
    clients: list[Client] = []

    async def make(upstream: str, **settings: Any) -> Client:
        client: Client = TestClient(TestServer(build_app(Settings(upstream=upstream,
                                                                  **settings))))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


def dead_url(credentials: str = "") -> str:
    return f"http://{credentials}127.0.0.1:{free_port()}/v1"  # nothing listens there


def unreachable_count(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("reflexguard_upstream_unreachable_total "):
            return float(line.split()[1])
    return 0.0


async def test_livez_answers_while_the_upstream_is_down(app_for: Callable[..., Any]) -> None:
    client = await app_for(dead_url())
    response = await client.get("/livez")
    assert response.status == 200 and (await response.json())["status"] == "ok"


async def test_readyz_is_503_with_the_reason_when_the_upstream_is_down(
        app_for: Callable[..., Any]) -> None:
    client = await app_for(dead_url())
    response = await client.get("/readyz")
    body = await response.json()
    assert response.status == 503, body
    assert body["status"] == "not_ready" and "unreachable" in body["reason"]
    assert body["checked_by"] == "probe"
    healthz = await client.get("/healthz")  # kept as documented: the process serves
    assert healthz.status == 200


async def test_readyz_is_200_once_the_upstream_answers_its_models_route(
        fake: tuple[FakeUpstream, TestServer], app_for: Callable[..., Any]) -> None:
    _, server = fake
    client = await app_for(str(server.make_url("/v1")))
    response = await client.get("/readyz")
    body = await response.json()
    assert response.status == 200, body
    assert body == {**body, "status": "ready", "checked_by": "probe"}
    assert body["upstream"] == str(server.make_url("/v1"))


async def test_recent_traffic_answers_readyz_without_a_probe(
        fake: tuple[FakeUpstream, TestServer], app_for: Callable[..., Any]) -> None:
    upstream, server = fake
    client = await app_for(str(server.make_url("/v1")))
    assert (await client.post("/v1/chat/completions", json=chat_body())).status == 200
    response = await client.get("/readyz")
    body = await response.json()
    assert response.status == 200 and body["checked_by"] == "request", body
    assert upstream.paths == ["/v1/chat/completions"]


async def test_concurrent_readyz_share_one_probe() -> None:
    probes = 0

    async def models(_: web.Request) -> web.Response:
        nonlocal probes
        probes += 1
        await asyncio.sleep(0.2)  # every /readyz below arrives while this one runs
        return web.json_response({"object": "list", "data": []})

    upstream_app = web.Application()
    upstream_app.router.add_get("/v1/models", models)
    server = TestServer(upstream_app)
    await server.start_server()
    client: Client = TestClient(TestServer(build_app(Settings(
        upstream=str(server.make_url("/v1"))))))
    await client.start_server()
    try:
        answers = await asyncio.gather(*(client.get("/readyz") for _ in range(8)))
        assert [a.status for a in answers] == [200] * 8
        assert probes == 1
        assert (await client.get("/readyz")).status == 200  # cached: still one probe
        assert probes == 1
    finally:
        await client.close()
        await server.close()


async def test_a_gateway_saying_the_upstream_is_down_is_not_ready(
        fake: tuple[FakeUpstream, TestServer], app_for: Callable[..., Any]) -> None:
    upstream, server = fake
    upstream.script.append(Scripted(status=503, body=b'{"error": "no healthy backend"}'))
    client = await app_for(str(server.make_url("/v1")))
    assert (await client.post("/v1/chat/completions", json=chat_body())).status == 503
    response = await client.get("/readyz")
    body = await response.json()
    assert response.status == 503 and body["reason"] == "upstream answered 503", body


async def test_a_probe_that_gets_no_answer_is_503_within_its_bound() -> None:
    """An upstream that accepts the connection and never answers: /readyz still answers,
    after the probe's own timeout (PROBE_TIMEOUT), with the reason."""
    async def never(_: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        raise AssertionError

    upstream_app = web.Application()
    upstream_app.router.add_get("/v1/models", never)
    server = TestServer(upstream_app)
    await server.start_server()
    client: Client = TestClient(TestServer(build_app(Settings(
        upstream=str(server.make_url("/v1"))))))
    await client.start_server()
    try:
        response = await asyncio.wait_for(client.get("/readyz"), PROBE_TIMEOUT * 20)
        body = await response.json()
        assert response.status == 503, body
        assert body["reason"] == f"upstream did not answer GET /models within " \
            f"{PROBE_TIMEOUT:g} s", body
    finally:
        await client.close()
        await server.close()


async def test_an_unreachable_upstream_is_logged_once_per_interval_and_always_counted(
        app_for: Callable[..., Any]) -> None:
    url = dead_url("agent:s3cret@")
    client = await app_for(url)
    with capture_logs() as logs:
        for _ in range(5):
            response = await client.post("/v1/chat/completions", json=chat_body())
            assert response.status == 502
    lines = [e for e in logs if e["event"] == "upstream_unreachable"]
    assert len(lines) == 1, logs  # rate-limited: one line per LOG_EVERY seconds
    line = lines[0]
    assert line["log_level"] == "warning"
    assert line["url"] == url.replace("agent:s3cret@", "") + "/chat/completions"
    assert "s3cret" not in repr(logs)
    assert line["error"] == "ClientConnectorError" and line["log_every_s"] == LOG_EVERY
    metrics = await (await client.get("/metrics")).text()
    assert unreachable_count(metrics) == 5
