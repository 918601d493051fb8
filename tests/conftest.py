"""Shared fixtures: a fake upstream on a real loopback socket, and reflexguard in front."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from reflexguard.http.app import build_app
from reflexguard.ops.config import Settings
from tests.fakes.fake_upstream import FakeUpstream
from tests.redis_server import RedisServer, SilentServer

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_order_details",
        "description": "Get an order. Example id: '#W0000000'.",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "detail": {"type": "string", "enum": ["brief", "full"]},
            },
            "required": ["order_id", "detail"],
            "additionalProperties": False,
        },
    },
}
CANCEL_TOOL = {
    "type": "function",
    "function": {
        "name": "cancel_order",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}
TOOLS = [WEATHER_TOOL, CANCEL_TOOL]


def chat_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a retail agent."},
            {"role": "user", "content": "Show me order #W1234567 in full."},
        ],
        "tools": TOOLS,
    }
    body.update(extra)
    return body


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeUpstream, TestServer]]:
    upstream = FakeUpstream()
    server = TestServer(upstream.app())
    await server.start_server()
    yield upstream, server
    await server.close()


ProxyFactory = Callable[..., Any]


@pytest.fixture
async def proxy(
    fake: tuple[FakeUpstream, TestServer], tmp_path: Path
) -> AsyncIterator[ProxyFactory]:
    """A factory: `await proxy(repair=False, ...)` gives a TestClient for reflexguard."""
    clients: list[TestClient[Any, Any]] = []
    _, server = fake

    async def make(**settings: Any) -> TestClient[Any, Any]:
        settings.setdefault("upstream", str(server.make_url("/v1")))
        settings.setdefault("events", tmp_path / "events.jsonl")
        app: web.Application = build_app(Settings(**settings))
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port; a missing binary fails the test."""
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def silent_redis() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()
