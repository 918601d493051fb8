"""The worker pool of `serve --workers N`: start, watch, restart, drain.

This is an I/O edge: an asyncio loop in the parent process. Each worker is a fresh
interpreter (`python -m reflexguard.cli.worker INDEX`, through the `deathsig.py` wrapper so
that it follows a SIGKILLed parent) in its own session (a terminal's Ctrl-C reaches only the
parent, which then drains the workers in order). A worker that dies is restarted after a
backoff that doubles while it keeps dying young, counted and logged as the fallback
`worker_restarted`. SIGTERM or SIGINT drains: every worker stops accepting and gets
`worker_grace` seconds for its in-flight requests; whatever is left after that (plus a
margin for its cleanup) is killed. A second signal kills at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass

import orjson
from prometheus_client.multiprocess import mark_process_dead
from pydantic import SecretStr

from reflexguard.cli.errors import CliError
from reflexguard.core.urls import upstream_base
from reflexguard.embedded.exits import describe_exit
from reflexguard.embedded.lifetime import WRAPPER
from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import Telemetry, configure_logging, multiprocess_dir

WORKER_MODULE = "reflexguard.cli.worker"
READY_LINE = b"listening\n"  # what a worker writes on its stdout once its socket listens
READY_TIMEOUT = 60.0  # a fresh interpreter imports the app and binds: ~1 s here
STABLE_AFTER = 30.0  # a worker that served this long starts its backoff afresh
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 30.0
KILL_MARGIN = 5.0  # after worker_grace: the worker's on_cleanup and interpreter exit


def settings_payload(settings: Settings) -> bytes:
    """The settings as JSON, secrets in clear, for a worker's stdin: argv is readable by
    every user on the machine (`ps`), stdin only by the two processes."""
    data = settings.model_dump(mode="json")
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            data[name] = value.get_secret_value()
    return orjson.dumps(data)


def restart_delay(deaths_in_a_row: int) -> float:
    """Seconds before restarting a worker that has died young this many times in a row:
    0.5, 1, 2, 4 ... capped at 30, so a crash loop costs a restart per 30 s, not a core."""
    return min(BACKOFF_CAP, BACKOFF_FIRST * 2.0 ** max(0, deaths_in_a_row - 1))


@dataclass
class Slot:
    index: int
    process: asyncio.subprocess.Process | None = None
    started: float = 0.0
    deaths_in_a_row: int = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


class Pool:
    def __init__(self, settings: Settings, telemetry: Telemetry, shared: str) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.shared = shared
        self.slots = [Slot(index) for index in range(settings.workers)]
        self.stopping = asyncio.Event()
        self._payload = settings_payload(settings)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)
        started = await asyncio.gather(*(self._start(slot) for slot in self.slots))
        if not all(started) and not self.stopping.is_set():
            await self._drain()
            failed = started.index(False)
            raise CliError(f"worker {failed} did not start (its log is above); "
                           f"stopped the others")
        self.telemetry.log.info(
            "listening", host=self.settings.host, port=self.settings.port,
            workers=len(self.slots), pids=[s.process.pid for s in self.slots if s.process],
            upstream=upstream_base(self.settings.upstream or ""), repair=self.settings.repair)
        keepers = [asyncio.create_task(self._keep(slot)) for slot in self.slots]
        await self.stopping.wait()
        await self._drain()
        for keeper in keepers:
            keeper.cancel()
        await asyncio.gather(*keepers, return_exceptions=True)
        self.telemetry.log.info("stopped", workers=len(self.slots))
        return 0

    def _on_signal(self) -> None:
        if not self.stopping.is_set():
            self.stopping.set()
            return
        # A second signal: the operator will not wait for the grace period.
        for slot in self.slots:
            if slot.alive and slot.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    slot.process.kill()

    async def _start(self, slot: Slot) -> bool:
        """Spawn the slot's worker, hand it the settings, wait until it listens."""
        command = [sys.executable, str(WRAPPER), str(os.getpid()),
                   sys.executable, "-m", WORKER_MODULE, str(slot.index)]
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            start_new_session=True)
        slot.process, slot.started = process, time.monotonic()
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(self._payload)
        with contextlib.suppress(ConnectionError):  # it died before reading: seen below
            await process.stdin.drain()
        process.stdin.close()
        try:
            line = await asyncio.wait_for(process.stdout.readline(), READY_TIMEOUT)
        except TimeoutError:
            line = b""
        if line == READY_LINE:
            self.telemetry.log.info("worker_started", worker=slot.index, pid=process.pid)
            return True
        if process.returncode is None:  # hung while starting: it cannot stay
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        await process.wait()
        return False

    async def _keep(self, slot: Slot) -> None:
        """Restart the slot's worker whenever it dies, until the pool stops."""
        while True:
            process = slot.process
            assert process is not None
            code = await process.wait()
            if self.stopping.is_set():
                return
            young = time.monotonic() - slot.started < STABLE_AFTER
            slot.deaths_in_a_row = slot.deaths_in_a_row + 1 if young else 1
            delay = restart_delay(slot.deaths_in_a_row)
            # Counters of the dead pid stay in its files (no lost series); only gauges that
            # describe live processes would go, and this drops them if any exist.
            mark_process_dead(process.pid, self.shared)  # type: ignore[no-untyped-call]
            self.telemetry.fallback("worker_restarted", worker=slot.index, pid=process.pid,
                                    exit_code=code, exit=describe_exit(code).what,
                                    restart_in_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), delay)
            if self.stopping.is_set():
                return
            await self._start(slot)  # one that fails to start is seen dead on the next turn

    async def _drain(self) -> None:
        live = [slot for slot in self.slots if slot.alive]
        self.telemetry.log.info("draining", workers=len(live),
                                grace_s=self.settings.worker_grace)
        for slot in live:
            assert slot.process is not None
            with contextlib.suppress(ProcessLookupError):
                slot.process.terminate()
        waits = asyncio.gather(*(slot.process.wait() for slot in live if slot.process))
        try:
            await asyncio.wait_for(asyncio.shield(waits),
                                   self.settings.worker_grace + KILL_MARGIN)
        except TimeoutError:
            for slot in live:
                if slot.alive and slot.process is not None:
                    self.telemetry.fallback("worker_killed_after_grace", worker=slot.index,
                                            pid=slot.process.pid)
                    with contextlib.suppress(ProcessLookupError):
                        slot.process.kill()
            await waits


def supervise(settings: Settings, shared: str) -> int:
    """Run the pool until it is told to stop; PROMETHEUS_MULTIPROC_DIR is set already."""
    if multiprocess_dir() != shared:
        raise CliError("internal error: prometheus_client was imported before the shared "
                       "metrics directory was set; /metrics would miss counts")
    configure_logging(settings.log_level)
    telemetry = Telemetry(settings.events)
    try:
        return asyncio.run(Pool(settings, telemetry, shared).run())
    finally:
        telemetry.close()
