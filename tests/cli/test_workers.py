"""`serve --workers N`: real worker processes on one loopback port, in front of a fake upstream.

Each test starts the real command line (`python -m reflexguard serve --workers 2`), reads
its JSON log from stderr, and talks to it over fresh connections (urllib opens one per
request), so the kernel's SO_REUSEPORT hashing spreads them over the workers. A pool's start
costs seconds of imports per worker, so checks that can follow one another on one pool share
it (each test's docstring says which), and an upstream that must stay busy is held by an
event, released when the test ends, rather than by a delay its shutdown would wait out.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from pydantic import SecretStr

from reflexguard.cli.errors import CliError
from reflexguard.cli.pool import restart_delay, settings_payload
from reflexguard.cli.workers import reserve
from reflexguard.ops.config import Settings
from reflexguard.ops.loopback import free_port
from tests.conftest import chat_body
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion
from tests.fakes.threaded_upstream import threaded_fake

VALID = Scripted(completion=tool_call_completion(
    "get_order_details", {"order_id": "#W1234567", "detail": "full"}))
WAIT = 60.0  # generous: a bound on a hang, not a measure of speed
MAX_TRIES = 64  # fresh connections until every worker has answered; 2**-63 to miss one


@dataclass
class HeldUpstream(FakeUpstream):
    """The fake, holding its first request until `release` is set: `arrived` says the
    upstream has it, and nothing answers it until the test says so."""

    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        if not self.arrived.is_set():
            self.arrived.set()
            await asyncio.get_running_loop().run_in_executor(None, self.release.wait, WAIT)
        return await super().chat(request)


class Served:
    """`reflexguard serve` as a child process, its stderr log parsed as it arrives."""

    def __init__(self, upstream: str, *flags: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "reflexguard", "serve", "--upstream", upstream,
             "--port", str(self.port), *flags],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.records: list[dict[str, Any]] = []
        self.text: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.text.append(line)
                with suppress(json.JSONDecodeError):
                    self.records.append(json.loads(line))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with self._changed:
            found = self._changed.wait_for(
                lambda: next((r for r in self.records if match(r)), None)
                or self.process.poll() is not None, WAIT)
            record = next((r for r in self.records if match(r)), None)
        assert found and record is not None, "".join(self.text[-20:])
        return record

    def started(self) -> dict[int, int]:
        """Worker index -> pid of its latest start."""
        self.wait_for(lambda r: r.get("event") == "listening" and "workers" in r)
        pids: dict[int, int] = {}
        for record in self.records:
            if record.get("event") == "worker_started":
                pids[record["worker"]] = record["pid"]
        return pids

    def post(self, body: dict[str, Any] | None = None,
             timeout: float = WAIT) -> tuple[int, str | None, dict[str, Any]]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            data=json.dumps(body or chat_body()).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return (response.status, response.headers.get("x-reflexguard-worker"),
                    json.loads(response.read()))

    def until_every_worker_answered(self, workers: int = 2) -> int:
        """Requests until each worker has served one; how many were sent."""
        seen: set[str] = set()
        for sent in range(1, MAX_TRIES + 1):
            status, worker, _ = self.post()
            assert status == 200 and worker is not None
            seen.add(worker)
            if len(seen) == workers:
                return sent
        raise AssertionError(f"only workers {seen} answered {MAX_TRIES} connections")

    def until_worker_answers(self, worker: str) -> int:
        for sent in range(1, MAX_TRIES + 1):
            status, answered_by, _ = self.post()
            assert status == 200
            if answered_by == worker:
                return sent
        raise AssertionError(f"worker {worker} did not answer {MAX_TRIES} connections")

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=WAIT) as response:
            return str(response.read().decode())

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(WAIT)
        self._reader.join(WAIT)
        return code


@contextmanager
def served(upstream: str, *flags: str) -> Iterator[Served]:
    server = Served(upstream, *flags)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.kill()  # a failed test must not leave a pool behind
            server.process.wait(WAIT)


def sample(metrics: str, prefix: str) -> float:
    """The sum of every series whose line starts with `prefix`."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(prefix))


OK_CALLS = 'reflexguard_tool_calls_total{channel="ok"'
RESTARTS = 'reflexguard_fallbacks_total{kind="worker_restarted"}'


def test_two_workers_share_the_port_one_metrics_view_and_a_killed_one_is_restarted(
        tmp_path: Path) -> None:
    """One pool, in order: (1) two workers share the port and any scrape shows the sum over
    both, every answer one attempt event; (2) a SIGKILLed worker is restarted, the port and
    the new worker answer, and the counts from before the kill remain in the metrics."""
    events = tmp_path / "events.jsonl"
    with threaded_fake(FakeUpstream(default=VALID)) as (_, url), \
            served(url, "--workers", "2", "--events", str(events)) as server:
        pids = server.started()
        assert len(set(pids.values())) == 2
        sent = server.until_every_worker_answered()
        # Whichever worker answers the scrape, it shows the sum over both.
        scrapes = {sample(server.metrics(), OK_CALLS) for _ in range(8)}
        assert scrapes == {float(sent)}
        victim = pids[0]
        os.kill(victim, signal.SIGKILL)
        restarted = server.wait_for(lambda r: r.get("kind") == "worker_restarted")
        assert (restarted["worker"], restarted["pid"], restarted["exit_code"]) == \
            (0, victim, -signal.SIGKILL)
        server.wait_for(lambda r: r.get("event") == "worker_started" and r["worker"] == 0
                        and r["pid"] != victim)
        after = server.until_worker_answers("0")  # the port answers, the new worker too
        metrics = server.metrics()
        assert sample(metrics, OK_CALLS) == sent + after
        assert sample(metrics, RESTARTS) == 1.0
        assert server.stop() == 0
    recorded = [json.loads(line) for line in events.read_text().splitlines()]
    assert len([r for r in recorded if r.get("event") == "attempt"]) == sent + after
    assert [r["exit_code"] for r in recorded if r.get("kind") == "worker_restarted"] == \
        [-signal.SIGKILL]


def test_sigterm_drains_a_request_in_flight() -> None:
    fake = HeldUpstream(default=VALID)
    with threaded_fake(fake) as (_, url), served(url, "--workers", "2") as server:
        server.started()
        answers: list[tuple[int, str | None, dict[str, Any]]] = []
        client = threading.Thread(target=lambda: answers.append(server.post()))
        client.start()
        assert fake.arrived.wait(WAIT) and not answers  # the upstream holds it
        server.process.send_signal(signal.SIGTERM)
        server.wait_for(lambda r: r.get("event") == "draining")
        fake.release.set()  # answered only once the pool drains
        client.join(WAIT)
        assert server.stop() == 0
    status, _, body = answers[0]
    assert status == 200
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "get_order_details"
    assert any(r.get("event") == "draining" for r in server.records)


def test_a_request_past_the_grace_is_cut_and_the_pool_still_stops() -> None:
    # The upstream answers only once the pool has stopped; the workers may drain for 1 s.
    fake = HeldUpstream(default=VALID)
    with threaded_fake(fake) as (_, url), \
            served(url, "--workers", "2", "--worker-grace", "1") as server:
        server.started()
        outcome: list[object] = []

        def call() -> None:
            try:
                outcome.append(server.post()[0])
            except (urllib.error.URLError, ConnectionError, OSError) as exc:
                outcome.append(exc)

        client = threading.Thread(target=call)
        client.start()
        assert fake.arrived.wait(WAIT)
        server.process.send_signal(signal.SIGTERM)
        assert server.stop() == 0
        client.join(WAIT)
        fake.release.set()
    assert outcome and outcome[0] != 200, outcome


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFLEXGUARD_")}
    return subprocess.run([sys.executable, "-m", "reflexguard", *args], capture_output=True,
                          text=True, timeout=WAIT, env=env)


def test_workers_need_an_upstream() -> None:
    result = run_cli("serve", "--workers", "2")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--workers needs --upstream" in lines[0], result.stderr


def test_a_port_held_elsewhere_is_one_line_a_second_pool_cannot_join_and_a_stuck_worker_is_killed(
        ) -> None:
    """(1) a port another socket holds: one line, exit 2, no pool; then one pool with a
    1 s grace, in order: (2) a second pool on its port cannot join (one line, no
    traceback); (3) a worker that ignores the drain (SIGSTOPped) is killed after the grace,
    not restarted, and the pool exits 0."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = run_cli("serve", "--upstream", "http://127.0.0.1:1/v1", "--workers", "2",
                         "--port", str(busy.getsockname()[1]))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "cannot listen" in lines[0], lines
    with threaded_fake(FakeUpstream(default=VALID)) as (_, url), \
            served(url, "--workers", "2", "--worker-grace", "1") as first:
        stuck = first.started()[1]
        second = run_cli("serve", "--upstream", url, "--workers", "2",
                         "--port", str(first.port))
        assert second.returncode == 2 and "cannot listen" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.post()[0] == 200  # the first pool still answers
        os.kill(stuck, signal.SIGSTOP)  # a stopped process cannot act on SIGTERM
        assert first.stop() == 0
    killed = [r for r in first.records if r.get("kind") == "worker_killed_after_grace"]
    assert [(r["worker"], r["pid"]) for r in killed] == [(1, stuck)]
    assert not any(r.get("kind") == "worker_restarted" for r in first.records)


def test_one_worker_is_the_single_process_path() -> None:
    with threaded_fake(FakeUpstream(default=VALID)) as (_, url), served(url) as server:
        server.wait_for(lambda r: r.get("event") == "listening")
        status, worker, _ = server.post()
        assert (status, worker) == (200, None)  # no worker, so no worker header
        pid = server.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert children == []  # no supervisor, no worker processes
        assert server.stop() == 0


def test_restart_backoff_doubles_and_is_capped() -> None:
    assert [restart_delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert restart_delay(100) == 30.0


def test_settings_reach_a_worker_whole_secrets_included(tmp_path: Path) -> None:
    settings = Settings(upstream="http://127.0.0.1:1/v1", upstream_api_key=SecretStr("k1"),
                        admin_token=SecretStr("t1"), events=tmp_path / "e.jsonl", workers=3,
                        upstream_dialects=["chat"])
    again = Settings(**orjson.loads(settings_payload(settings)))
    assert again.model_dump() == settings.model_dump()
    assert again.upstream_api_key is not None and again.admin_token is not None
    assert (again.upstream_api_key.get_secret_value(), again.admin_token.get_secret_value()) \
        == ("k1", "t1")


@pytest.fixture(autouse=True)
def _no_inherited_metrics_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


def test_the_reserved_port_hands_every_connection_to_the_listening_workers() -> None:
    held, port = reserve("127.0.0.1", 0)
    listeners = []
    for _ in range(2):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        listener.settimeout(0.5)
        listeners.append(listener)
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(50)]
    accepted = []
    for listener in listeners:
        count = 0
        with suppress(TimeoutError):
            while True:
                listener.accept()[0].close()
                count += 1
        accepted.append(count)
    for sock in [held, *listeners, *clients]:
        sock.close()
    assert sum(accepted) == 50  # none waits on the reservation, which never listens
    with pytest.raises(CliError, match="cannot listen"), socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        reserve("127.0.0.1", busy.getsockname()[1])
