"""The embedded child under supervision: readiness, deaths, bounded restarts, honest health.

This is an I/O edge: an asyncio task in the server's process. The states are
`starting` (the first child is loading), `ready` (it answered /v1/models and decoded a
token), `restarting` (it died; another is on its way after a backoff) and `failed` (the
restart budget is spent; the server keeps answering 503 and /healthz says so, so that an
orchestrator sees it). Every death is one error log line (the signal by name or the exit
code, the likely cause, the end of the child's log) and a counted fallback
`embedded_child_died`; every restart counts in `reflexguard_upstream_restarts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from prometheus_client import Counter as PromCounter

from reflexguard.embedded import lifetime
from reflexguard.embedded.child import DECODE_PROBE, ModelServer
from reflexguard.embedded.exits import describe_exit
from reflexguard.ops.telemetry import Telemetry

State = Literal["starting", "ready", "restarting", "failed"]
Launcher = Callable[[], ModelServer]  # starts a child and returns at once
DIED = "died while starting"  # _until_ready: the child ended on its own


@dataclass(frozen=True)
class RestartPolicy:
    backoff: tuple[float, ...] = (1.0, 2.0, 4.0)  # one delay per allowed restart
    ready_timeout: float = 180.0  # load + first decode; 0.5B loads in ~2 s, 7B in ~60 s
    # A child that served this long has earned its restart budget back: one crash a day
    # must not exhaust three restarts in three days.
    stable_after: float = 600.0
    poll_interval: float = 0.25

    @property
    def max_restarts(self) -> int:
        return len(self.backoff)


class Supervisor:
    def __init__(self, launch: Launcher, policy: RestartPolicy | None = None) -> None:
        self._launch = launch
        self.policy = policy or RestartPolicy()
        self.state: State = "starting"
        self.child: ModelServer | None = None
        self.restarts = 0  # since the child was last stable
        self.restarts_total = 0
        self.last_exit: str | None = None
        self._telemetry: Telemetry | None = None
        self._restart_metric: PromCounter | None = None
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def start(self, telemetry: Telemetry) -> None:
        """Launch the first child in the background; call from the event loop's thread."""
        self._telemetry = telemetry
        self._restart_metric = PromCounter(
            "reflexguard_upstream_restarts", "Embedded model server restarts after a death",
            registry=telemetry.registry)
        self._task = asyncio.create_task(self._run(), name="embedded-supervisor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.child is not None:
            await asyncio.to_thread(lifetime.stop, self.child.process)

    # -- what the proxy asks ------------------------------------------------------------

    def serving(self) -> ModelServer | None:
        """The child to send requests to, or None while there is none."""
        child = self.child
        if self.state == "ready" and child is not None and child.alive():
            return child
        return None

    def observed_state(self) -> State:
        # The watch loop polls; a death it has not seen yet is already not `ready`.
        if self.state == "ready" and self.serving() is None:
            return "restarting" if self.restarts < self.policy.max_restarts else "failed"
        return self.state

    def unavailable(self) -> str:
        state = self.observed_state()
        if state == "starting":
            return "the embedded model is still starting; retry shortly (GET /healthz)"
        if state == "restarting":
            return (f"the embedded model server died ({self._last_exit()}) and is restarting; "
                    f"retry shortly (GET /healthz)")
        return (f"the embedded model server failed after {self.restarts_total} restarts "
                f"({self._last_exit()}); see reflexguard's log")

    def _last_exit(self) -> str | None:
        # A request can see the death before the watch loop does: read it off the child.
        child = self.child
        if self.state == "ready" and child is not None and child.process.returncode is not None:
            return describe_exit(child.process.returncode).what
        return self.last_exit

    async def confirm_down(self, within: float = 1.0) -> bool:
        """After a failed request: did the child die? The connection breaks a moment
        before the process can be reaped, so this waits up to `within` to be sure."""
        child = self.child
        if child is None or self.state != "ready":
            return True
        deadline = time.monotonic() + within
        while child.alive():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def health(self) -> tuple[int, dict[str, Any]]:
        state = self.observed_state()
        child = self.serving()
        body = {"status": state, "upstream": child.base_url if child else None,
                "model_variant": self.child.variant if self.child else None,
                "restarts": self.restarts_total, "last_exit": self._last_exit()}
        if state != "ready":
            body["reason"] = self.unavailable()
        return (200 if state == "ready" else 503), body

    # -- the watch loop -----------------------------------------------------------------

    @property
    def telemetry(self) -> Telemetry:
        if self._telemetry is None:
            raise RuntimeError("Supervisor.start() was not called")
        return self._telemetry

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.policy.ready_timeout, sock_connect=2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                child = self._spawn()
                if child is not None:
                    await self._serve(child, session)
                if not await self._restart():
                    return

    def _spawn(self) -> ModelServer | None:
        # Spawned on the loop's own thread: the death signal follows the spawning thread.
        try:
            child = self.child = self._launch()
        except Exception as exc:  # e.g. the log folder is not writable: a death, not a hang
            self.child = None
            self.last_exit = f"could not start: {type(exc).__name__}: {exc}"
            self.telemetry.fallbacks.labels("embedded_child_died").inc()
            self.telemetry.log.error("embedded_child_died", kind="embedded_child_died",
                                     exit="not started", likely_cause=self.last_exit,
                                     restarts_left=self.policy.max_restarts - self.restarts)
            return None
        if not child.follows_parent:
            self.telemetry.fallback("parent_death_signal_unavailable")
        return child

    async def _serve(self, child: ModelServer, session: aiohttp.ClientSession) -> None:
        """From launch to death: wait until ready, then until it exits; report the death."""
        not_ready = await self._until_ready(child, session)
        if not_ready is None:
            began = time.monotonic()
            self.state = "ready"
            self.telemetry.log.info("embedded_child_ready", upstream=child.base_url,
                                    variant=child.variant, pid=child.process.pid)
            await self._until_exit(child)
            if time.monotonic() - began >= self.policy.stable_after:
                self.restarts = 0
        self._report_death(child, not_ready)

    async def _restart(self) -> bool:
        """Back off and go on, or give up (state `failed`) once the restarts are spent."""
        if self.restarts >= self.policy.max_restarts:
            self.state = "failed"
            self.telemetry.fallbacks.labels("embedded_child_gave_up").inc()
            self.telemetry.log.error(
                "embedded_child_gave_up", kind="embedded_child_gave_up",
                restarts=self.restarts_total, last_exit=self.last_exit,
                detail="no more restarts: requests get 503 and /healthz says failed until "
                       "reflexguard is restarted")
            return False
        delay = self.policy.backoff[self.restarts]
        self.restarts += 1
        self.restarts_total += 1
        self.state = "restarting"
        assert self._restart_metric is not None
        self._restart_metric.inc()
        self.telemetry.log.warning("embedded_child_restarting", attempt=self.restarts,
                                   of=self.policy.max_restarts, delay_s=delay)
        await asyncio.sleep(delay)
        return True

    async def _until_ready(self, child: ModelServer,
                           session: aiohttp.ClientSession) -> str | None:
        """None once ready; else why not (the child is then stopped or already dead)."""
        deadline = time.monotonic() + self.policy.ready_timeout
        loaded = False
        last = "no answer yet"
        while child.alive():
            if time.monotonic() >= deadline:
                step = "decoded a token" if loaded else "answered /v1/models"
                await asyncio.to_thread(lifetime.stop, child.process)
                return (f"had not {step} after {self.policy.ready_timeout:g} s "
                        f"(last: {last}); stopped by reflexguard")
            try:
                if not loaded:
                    async with session.get(child.base_url + "/models",
                                           timeout=aiohttp.ClientTimeout(total=2)) as answer:
                        loaded = answer.status == 200
                        last = f"/v1/models answered {answer.status}"
                else:
                    async with session.post(child.base_url + "/completions",
                                            json=DECODE_PROBE) as answer:
                        await answer.read()
                        if answer.status == 200:
                            return None
                        last = f"the one-token decode answered {answer.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = type(exc).__name__
            await asyncio.sleep(self.policy.poll_interval)
        return DIED

    async def _until_exit(self, child: ModelServer) -> None:
        while child.alive():
            await asyncio.sleep(self.policy.poll_interval)

    def _report_death(self, child: ModelServer, not_ready: str | None) -> None:
        """The one line about a death: how, the likely cause, the end of the child's log."""
        code = child.process.returncode
        reason = describe_exit(code if code is not None else 0)
        if not_ready in (None, DIED):
            what, cause = reason.what, reason.cause
        else:
            what, cause = "not ready in time", str(not_ready)
        self.last_exit = what if not_ready is None else f"{what} while starting"
        self.telemetry.fallbacks.labels("embedded_child_died").inc()
        self.telemetry.log.error(
            "embedded_child_died", kind="embedded_child_died", exit=what, signal=reason.signal,
            exit_code=code, likely_cause=cause, log_tail=child.log_tail() or "(empty)",
            log=str(child.log_path), variant=child.variant, pid=child.process.pid,
            while_state="starting" if not_ready is not None else "ready",
            restarts_left=self.policy.max_restarts - self.restarts)
