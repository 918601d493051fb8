"""`--state redis://...` end to end: reflexguard apps and processes sharing one real Redis
(started by the `redis_server` fixture), and Redis down or silent under live requests."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from reflexguard.http.app import GUARD_KEY
from reflexguard.ops.loopback import free_port
from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.redis_server import RedisServer, SilentServer

HANG_GUARD = 60.0  # fails a hung test instead of blocking CI; not a measured figure
GOOD = {"order_id": "#W1234567", "detail": "full"}
SESSION = {"x-reflexguard-session": "ep-shared"}
FALLBACKS = 'reflexguard_fallbacks_total{kind="session_state_unavailable"}'


def invalid() -> Scripted:
    return Scripted(tool_call_completion("get_order_detail", GOOD))


async def flush(client: Any) -> None:
    await client.server.app[GUARD_KEY].sessions.flush()


async def fallbacks(client: Any) -> str:
    metrics = await (await client.get("/metrics")).text()
    return next((line for line in metrics.splitlines() if line.startswith(FALLBACKS)), "")


async def test_two_apps_share_a_session(fake, proxy, redis_server: RedisServer) -> None:
    upstream, _ = fake
    upstream.default = invalid()
    one = await proxy(state=redis_server.url, state_timeout=2, max_repairs=0)
    two = await proxy(state=redis_server.url, state_timeout=2, max_repairs=1)
    assert (await one.post("/v1/chat/completions", json=chat_body(), headers=SESSION)).ok
    assert (await two.post("/v1/chat/completions", json=chat_body(), headers=SESSION)).ok
    await flush(one)
    await flush(two)
    answers = [await client.get("/reflexguard/sessions/ep-shared") for client in (one, two)]
    assert [a.headers["x-reflexguard-state"] for a in answers] == ["shared", "shared"]
    first, second = [await a.json() for a in answers]
    assert first == second
    assert first["violations"] == {"unknown_tool": 3}  # 1 through one, 2 through two
    assert (first["repairs_attempted"], first["repairs_succeeded"]) == (1, 0)
    missing = await one.get("/reflexguard/sessions/nobody")
    assert missing.status == 404 and missing.headers["x-reflexguard-state"] == "shared"


async def test_the_route_keeps_its_admin_token(fake, proxy, redis_server: RedisServer) -> None:
    client = await proxy(state=redis_server.url, admin_token="t0ken")
    assert (await client.get("/reflexguard/sessions/x")).status == 401
    allowed = await client.get("/reflexguard/sessions/x",
                               headers={"Authorization": "Bearer t0ken"})
    assert allowed.status == 404


async def test_writes_in_flight_are_drained_on_cleanup(fake, proxy,
                                                       redis_server: RedisServer) -> None:
    upstream, _ = fake
    upstream.default = invalid()
    client = await proxy(state=redis_server.url, state_timeout=2, max_repairs=0)
    await client.post("/v1/chat/completions", json=chat_body(), headers=SESSION)
    await client.close()  # no flush: the app's cleanup must finish the write
    reader = await proxy(state=redis_server.url, state_timeout=2)
    record = await (await reader.get("/reflexguard/sessions/ep-shared")).json()
    assert record["violations"] == {"unknown_tool": 1}


async def test_redis_down_still_answers_from_local_state(fake, proxy) -> None:
    upstream, _ = fake
    upstream.default = invalid()
    client = await proxy(state=f"redis://127.0.0.1:{free_port()}/0", state_timeout=0.3,
                         max_repairs=0)
    async with asyncio.timeout(HANG_GUARD):
        answer = await client.post("/v1/chat/completions", json=chat_body(), headers=SESSION)
        assert answer.status == 200
        await flush(client)
        route = await client.get("/reflexguard/sessions/ep-shared")
    assert route.status == 200 and route.headers["x-reflexguard-state"] == "local"
    assert (await route.json())["violations"] == {"unknown_tool": 1}
    assert await fallbacks(client) == f"{FALLBACKS} 2.0"  # the write and the read


async def test_a_silent_redis_never_holds_an_answer(fake, proxy,
                                                    silent_redis: SilentServer) -> None:
    upstream, _ = fake
    upstream.default = invalid()
    client = await proxy(state=silent_redis.url, state_timeout=2, max_repairs=0)
    async with asyncio.timeout(HANG_GUARD):
        answer = await client.post("/v1/chat/completions", json=chat_body(), headers=SESSION)
        assert answer.status == 200
        # Answered while the session write still waits on Redis: the answer never did.
        assert client.server.app[GUARD_KEY].sessions.writes_in_flight == 1
        route = await client.get("/reflexguard/sessions/ep-shared")
        await flush(client)
    assert route.status == 200 and route.headers["x-reflexguard-state"] == "local"
    assert (await route.json())["violations"] == {"unknown_tool": 1}
    assert await fallbacks(client) == f"{FALLBACKS} 2.0"


# -- two reflexguard processes ---------------------------------------------------------------


@pytest.fixture
async def serve(fake) -> AsyncIterator[Callable[..., Any]]:
    """Starts `python -m reflexguard serve` in front of the fake upstream; yields its URL."""
    _, server = fake
    processes: list[subprocess.Popen[bytes]] = []

    async def start(*flags: str) -> str:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "reflexguard", "serve", "--upstream",
             str(server.make_url("/v1")), "--port", str(port), "--max-repairs", "0", *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "REFLEXGUARD_LOG_LEVEL": "warning"})
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            while True:
                assert process.poll() is None, "reflexguard serve exited"
                try:
                    async with http.get(url + "/healthz") as health:
                        if health.status == 200:
                            return url
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=HANG_GUARD)


async def test_two_processes_share_a_session(fake, serve, redis_server: RedisServer) -> None:
    upstream, _ = fake
    upstream.default = invalid()
    async with asyncio.timeout(HANG_GUARD):
        urls = [await serve("--state", redis_server.url, "--state-timeout", "2")
                for _ in range(2)]
        async with aiohttp.ClientSession() as http:
            for url in urls:
                async with http.post(url + "/v1/chat/completions", json=chat_body(),
                                     headers=SESSION) as answer:
                    assert answer.status == 200
            # Each process writes after its answer: read until both writes have landed.
            while True:
                records = []
                for url in urls:
                    async with http.get(url + "/reflexguard/sessions/ep-shared") as route:
                        assert route.headers["x-reflexguard-state"] == "shared"
                        records.append(await route.read() if route.status == 200 else b"")
                if records[0] and b'"unknown_tool":2' in records[0].replace(b" ", b""):
                    break
                await asyncio.sleep(0.05)
    assert records[0] == records[1]  # byte for byte: nothing of the answering process


def _with_failed_results(failures: int) -> dict[str, Any]:
    body = chat_body()
    for n in range(failures):
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "get_order_detail", "arguments": "{}"}}
        body["messages"] += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "Error: order not found"},
        ]
    return body


async def test_the_record_keeps_the_most_failures_the_environment_reported(
        fake, proxy, redis_server: RedisServer) -> None:
    # Read from the conversation with no error budget set: a session still learns them.
    upstream, _ = fake
    upstream.default = invalid()
    client = await proxy(state=redis_server.url, state_timeout=2, max_repairs=0)
    for failures in (2, 1):  # a later, shorter conversation never lowers the count
        answer = await client.post("/v1/chat/completions", json=_with_failed_results(failures),
                                   headers={"x-reflexguard-session": "ep-env"})
        assert answer.ok
    await flush(client)
    record = await (await client.get("/reflexguard/sessions/ep-env")).json()
    assert record["environment_errors"] == 2
