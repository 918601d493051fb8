"""The supervised embedded child, with a fake child that dies the ways llama.cpp does.

No model runs: tests/fakes/fake_child.py answers like llama-cpp-python's server and, on a chosen
request, kills itself with SIGILL or SIGKILL or exits 1. The client must get an
OpenAI-format 503 `upstream_unavailable`, the child must come back (healthz 200), and the
death must be a counted, logged event.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from structlog.testing import capture_logs

from reflexguard.cli.serve import supervised_app
from reflexguard.embedded import lifetime
from reflexguard.embedded.child import ModelServer
from reflexguard.embedded.supervisor import RestartPolicy, Supervisor
from reflexguard.ops.config import Settings
from reflexguard.ops.loopback import free_port

FAKE_CHILD = Path(__file__).parents[1] / "fakes" / "fake_child.py"
FAST = RestartPolicy(backoff=(0.1, 0.1, 0.1), ready_timeout=20.0, poll_interval=0.05)

Client = TestClient[Any, Any]


def fake_launcher(tmp_path: Path, *options: str) -> Callable[[], ModelServer]:
    def launch() -> ModelServer:
        port = free_port()
        log_path = tmp_path / f"fake-child-{port}.log"
        with log_path.open("wb") as log:
            spawned = lifetime.spawn([sys.executable, str(FAKE_CHILD), str(port), *options],
                                     log)
        return ModelServer(spawned.process, f"http://127.0.0.1:{port}/v1", log_path, "FAKE",
                           spawned.follows_parent)
    return launch


@pytest.fixture
async def supervised(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """A factory: `await supervised(*fake_child_options, policy=...)` -> (client, supervisor)."""
    clients: list[Client] = []

    async def make(*options: str, policy: RestartPolicy = FAST) -> tuple[Client, Supervisor]:
        supervisor = Supervisor(fake_launcher(tmp_path, *options), policy)
        settings = Settings(upstream=None, tool_call_format="content", log_level="info")
        client: Client = TestClient(TestServer(supervised_app(settings, supervisor)))
        await client.start_server()
        clients.append(client)
        return client, supervisor

    yield make
    for client in clients:
        await client.close()


async def health(client: Client) -> tuple[int, dict[str, Any]]:
    response = await client.get("/healthz")
    return response.status, await response.json()


async def wait_for(client: Client, status: str, timeout: float = 15.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, body = await health(client)
        if body["status"] == status:
            assert code == (200 if status == "ready" else 503), body
            return body
        assert asyncio.get_running_loop().time() < deadline, f"never {status}: {body}"
        await asyncio.sleep(0.05)


def chat(text: str) -> dict[str, Any]:
    return {"model": "fake", "messages": [{"role": "user", "content": text}]}


def assert_unavailable(status: int, body: dict[str, Any]) -> None:
    assert status == 503, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "upstream_unavailable"
    assert error["type"] == "service_unavailable"


def metric(text: str, name: str) -> float:
    """An unlabelled sample's value from Prometheus text."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


async def metrics(client: Client) -> str:
    return await (await client.get("/metrics")).text()


async def test_healthz_and_requests_are_503_while_the_child_starts(
        supervised: Callable[..., Any]) -> None:
    client, _ = await supervised("--start-delay", "1.5")
    code, body = await health(client)
    assert (code, body["status"]) == (503, "starting")
    response = await client.post("/v1/chat/completions", json=chat("hi"))
    assert_unavailable(response.status, await response.json())
    models = await client.get("/v1/models")  # any proxied route, not only chat
    assert_unavailable(models.status, await models.json())
    ready = await wait_for(client, "ready")
    assert ready["upstream"].startswith("http://127.0.0.1:")
    response = await client.post("/v1/chat/completions", json=chat("hi"))
    assert response.status == 200
    assert "says hello" in (await response.json())["choices"][0]["message"]["content"]


@pytest.mark.parametrize("how", ["SIGILL", "SIGKILL", "exit1"])
async def test_a_child_dying_mid_request_gives_503_then_restarts(
        supervised: Callable[..., Any], how: str) -> None:
    client, supervisor = await supervised("--die", how, "--die-on", "chat")
    first = await wait_for(client, "ready")
    first_pid = supervisor.child.process.pid if supervisor.child else None
    with capture_logs() as logs:
        response = await client.post("/v1/chat/completions", json=chat("please die"))
        assert_unavailable(response.status, await response.json())
        again = await wait_for(client, "ready")
    assert again["upstream"] != first["upstream"]  # a new child on a new port
    assert supervisor.child is not None and supervisor.child.process.pid != first_pid
    expected = "exit code 1" if how == "exit1" else how
    assert again["restarts"] == 1 and again["last_exit"] == expected
    deaths = [e for e in logs if e["event"] == "embedded_child_died"]
    assert len(deaths) == 1, logs  # one line per death, naming the signal and the cause
    assert deaths[0]["exit"] == expected
    assert deaths[0]["log_tail"] and "dying with" in deaths[0]["log_tail"]
    if how == "SIGILL":
        assert deaths[0]["signal"] == "SIGILL"
        assert "CPU instructions this machine cannot run" in deaths[0]["likely_cause"]
        assert "GGML_NATIVE=OFF" in deaths[0]["likely_cause"]
    text = await metrics(client)
    assert metric(text, "reflexguard_upstream_restarts_total") == 1.0
    assert 'reflexguard_fallbacks_total{kind="embedded_child_died"} 1.0' in text
    response = await client.post("/v1/chat/completions", json=chat("hi again"))
    assert response.status == 200  # the proxy follows the restarted child's new URL


async def test_failed_once_the_restarts_are_spent(supervised: Callable[..., Any]) -> None:
    policy = RestartPolicy(backoff=(0.05, 0.05), ready_timeout=20.0, poll_interval=0.05)
    client, _ = await supervised("--die", "SIGILL", "--die-on", "probe", policy=policy)
    body = await wait_for(client, "failed")
    assert body["restarts"] == 2 and body["last_exit"] == "SIGILL while starting"
    response = await client.post("/v1/chat/completions", json=chat("hi"))
    payload = await response.json()
    assert_unavailable(response.status, payload)
    assert "failed after 2 restarts" in payload["error"]["message"]
    text = await metrics(client)
    assert 'reflexguard_fallbacks_total{kind="embedded_child_died"} 3.0' in text
    assert 'reflexguard_fallbacks_total{kind="embedded_child_gave_up"} 1.0' in text
    assert metric(text, "reflexguard_upstream_restarts_total") == 2.0


async def test_an_external_upstream_keeps_the_plain_healthz(proxy: Any) -> None:
    client = await proxy()
    response = await client.get("/healthz")
    assert response.status == 200
    assert (await response.json())["status"] == "ok"


async def test_stopping_the_app_stops_the_child(supervised: Callable[..., Any]) -> None:
    client, supervisor = await supervised()
    await wait_for(client, "ready")
    assert supervisor.child is not None
    process = supervisor.child.process
    await client.close()
    assert process.poll() is not None


async def test_a_launch_that_raises_is_a_counted_death_not_a_hang(tmp_path: Path) -> None:
    def broken() -> ModelServer:
        raise PermissionError("logs folder is read-only")

    supervisor = Supervisor(broken, RestartPolicy(backoff=(0.01,), poll_interval=0.01))
    settings = Settings(upstream=None, tool_call_format="content")
    client: Client = TestClient(TestServer(supervised_app(settings, supervisor)))
    await client.start_server()
    try:
        body = await wait_for(client, "failed")
        assert "could not start: PermissionError" in body["last_exit"]
        text = await metrics(client)
        assert 'reflexguard_fallbacks_total{kind="embedded_child_died"} 2.0' in text
    finally:
        await client.close()
