"""What reflexguard knows of its upstream's health, for /readyz and the unreachable log.

This is an I/O edge: it may probe the upstream's GET /models. Readiness is read, in
order, from (docs/config.md, "Health"):
1. the last outcome of real traffic, when it is under FRESH_SECONDS old: any HTTP answer
   but 502/503/504 means the upstream answered; a refused or broken connection, or a
   gateway's 502/503/504, means it did not. Busy traffic therefore never probes;
2. else one probe of GET /models, bounded by PROBE_TIMEOUT and shared by every /readyz
   that arrives while it runs, whose outcome is then the last outcome.
So /readyz waits on the upstream at most PROBE_TIMEOUT and never blocks the event loop;
it is what LiteLLM's /health/readiness and vLLM's /health (engine alive) answer, with
the upstream's reachability as the condition.

An unreachable upstream is counted (reflexguard_upstream_unreachable_total) and logged
as a WARNING naming the URL without credentials, at most once per LOG_EVERY seconds (the
line says how many were not logged since the last), so a dead upstream under load does
not flood the log.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from reflexguard.core.limits import clip
from reflexguard.core.urls import redact
from reflexguard.http.upstream import UpstreamFailure, UpstreamTimeout
from reflexguard.ops.telemetry import Telemetry

FRESH_SECONDS = 10.0
PROBE_TIMEOUT = 1.0  # an orchestrator's readiness probe times out after 1 s by default
LOG_EVERY = 10.0
GATEWAY_DOWN = (502, 503, 504)  # a proxy in front of the upstream saying it is down


@dataclass(frozen=True)
class Outcome:
    answered: bool
    at: float  # time.monotonic()
    reason: str
    source: str  # "request" or "probe"


class UpstreamHealth:
    """Upstream.request and .stream report every outcome here (Upstream.outcomes)."""

    def __init__(self, telemetry: Telemetry, clock: Callable[[], float] = time.monotonic,
                 ) -> None:
        self._telemetry = telemetry
        self._clock = clock
        self._last: Outcome | None = None
        # The latest answer, as it came: (status, when, source). Every request reports one,
        # so it is kept as a tuple and read into an Outcome only when /readyz asks.
        self._answer: tuple[int, float, str] | None = None
        self._probing: asyncio.Task[None] | None = None
        self._source = "request"
        self._logged_at = -math.inf
        self._unlogged = 0

    @property
    def last(self) -> Outcome | None:
        """The latest outcome, of real traffic or of a probe."""
        if self._answer is not None:
            status, at, source = self._answer
            return Outcome(status not in GATEWAY_DOWN, at, f"upstream answered {status}",
                           source)
        return self._last

    @last.setter
    def last(self, outcome: Outcome | None) -> None:
        self._answer = None
        self._last = outcome

    def answered(self, status: int, source: str = "request") -> None:
        self._answer = (status, self._clock(), source)

    def unreachable(self, url: str, error: BaseException) -> None:
        self.last = Outcome(False, self._clock(),
                            f"upstream unreachable: {type(error).__name__}", "request")
        self._telemetry.upstream_unreachable.inc()
        now = self._clock()
        if now - self._logged_at < LOG_EVERY:
            self._unlogged += 1
            return
        self._telemetry.log.warning(
            "upstream_unreachable", kind="upstream_unreachable", url=redact(url),
            error=type(error).__name__, detail=clip(str(error), 300),
            not_logged_since_last=self._unlogged, log_every_s=LOG_EVERY)
        self._logged_at = now
        self._unlogged = 0

    async def ready(self, probe: Callable[[], Awaitable[int]]) -> Outcome:
        """The upstream's readiness: the last fresh outcome, else one shared probe's.
        `probe` returns the status of GET /models, bounded by PROBE_TIMEOUT."""
        last = self.last
        if last is not None and self._clock() - last.at < FRESH_SECONDS:
            return last
        if self._probing is None or self._probing.done():
            self._probing = asyncio.create_task(self._probe(probe), name="readiness-probe")
        # Shielded: a /readyz whose client hangs up must not cancel the others' probe.
        await asyncio.shield(self._probing)
        assert self.last is not None  # _probe always records one
        return self.last

    async def _probe(self, probe: Callable[[], Awaitable[int]]) -> None:
        try:
            status = await probe()
        except UpstreamTimeout:
            self.last = Outcome(False, self._clock(), f"upstream did not answer GET /models "
                                f"within {PROBE_TIMEOUT:g} s", "probe")
            return
        except UpstreamFailure as exc:  # unreachable: counted and logged where raised
            self.last = Outcome(False, self._clock(), str(exc), "probe")
            return
        self.answered(status, "probe")
