"""Session state: what one agent episode has cost so far, in this process or on Redis.

An I/O edge. Every request is recorded once, when its outcome is known, into the local
(in-memory) store and, with `--state redis://...`, into Redis in the background, so an
answer never waits on Redis. The session route reads Redis for at most `state_timeout`
and otherwise answers from local state. Redis slow or down is a counted, logged fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from reflexguard.core.attempts import Outcome
from reflexguard.core.channels import Channel

DEFAULT_TTL = 86_400.0  # Settings.session_ttl's default, for a Telemetry built alone
SESSION_CAPACITY = 10_000  # local sessions kept (least recently seen dropped first)
PENDING_REQUESTS = 4_096  # requests between their first attempt and their outcome
MAX_BACKGROUND_WRITES = 1_024  # sessions queued for Redis; past it a write stays local
BATCH_SESSIONS = 32  # sessions per MULTI: a batch must fit in `state_timeout`
DRAIN_SLACK = 1.0  # seconds beyond `timeout` a flush waits for the event loop to run
FALLBACK_LOG_INTERVAL = 10.0  # seconds between two log lines of one fallback kind
UNAVAILABLE = "session_state_unavailable"
KEY_PREFIX = "reflexguard:session:"
VIOLATION_PREFIX = "v:"


# HINCRBY cannot keep a maximum: last_seen (clocks of several replicas) and
# environment_errors (the highest count read from the conversation) only ever rise.
# Sent as EVAL, not EVALSHA: a pipeline holding a registered script first asks
# SCRIPT EXISTS, one more round trip per write.
HMAX = """
for i = 1, #ARGV, 2 do
  local old = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) > old then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""

StateSource = Literal["shared", "local"]


class SessionRecord(BaseModel):
    """The JSON of `GET /reflexguard/sessions/{id}`: the same from every worker and replica
    sharing a store, so it carries nothing of the process that answers."""

    model_config = ConfigDict(frozen=True)

    session: str
    violations: dict[str, int]  # invalid tool calls, by channel name
    repairs_attempted: int = 0
    repairs_succeeded: int = 0
    environment_errors: int = 0  # the highest count the conversation has reported so far
    first_seen: float
    last_seen: float


@dataclass
class SessionDelta:
    """One request's contribution, written in one go."""

    violations: Counter[str] = field(default_factory=Counter)
    repairs_attempted: int = 0
    repairs_succeeded: int = 0
    environment_errors: int | None = None
    at: float = 0.0
    first_at: float | None = None  # set when deltas of several requests are merged
    requests: int = 1

    def merge(self, other: SessionDelta) -> None:
        self.violations.update(other.violations)
        self.repairs_attempted += other.repairs_attempted
        self.repairs_succeeded += other.repairs_succeeded
        if other.environment_errors is not None:
            self.environment_errors = max(self.environment_errors or 0, other.environment_errors)
        self.first_at = min(self.first_at or self.at, other.first_at or other.at)
        self.at = max(self.at, other.at)
        self.requests += other.requests


class SessionStore(Protocol):
    async def record(self, session: str, delta: SessionDelta) -> None: ...

    async def record_many(self, deltas: Mapping[str, SessionDelta]) -> None: ...

    async def get(self, session: str) -> SessionRecord | None: ...

    async def close(self) -> None: ...


class MemoryStore:
    """One process's sessions: bounded (least recently seen dropped) and TTL'd."""

    def __init__(self, ttl: float, capacity: int = SESSION_CAPACITY,
                 clock: Callable[[], float] = time.time) -> None:
        self._ttl = ttl
        self._capacity = capacity
        self._clock = clock
        self._sessions: OrderedDict[str, SessionRecord] = OrderedDict()

    def add(self, session: str, delta: SessionDelta) -> None:
        self._expire()
        old = self._sessions.pop(session, None)
        violations = Counter(old.violations if old else {})
        violations.update(delta.violations)
        errors = max(old.environment_errors if old else 0, delta.environment_errors or 0)
        self._sessions[session] = SessionRecord(
            session=session, violations=dict(violations),
            repairs_attempted=(old.repairs_attempted if old else 0) + delta.repairs_attempted,
            repairs_succeeded=(old.repairs_succeeded if old else 0) + delta.repairs_succeeded,
            environment_errors=errors,
            first_seen=old.first_seen if old else delta.at,
            last_seen=max(old.last_seen, delta.at) if old else delta.at,
        )
        if len(self._sessions) > self._capacity:
            self._sessions.popitem(last=False)

    def peek(self, session: str) -> SessionRecord | None:
        record = self._sessions.get(session)
        if record is None or record.last_seen + self._ttl < self._clock():
            return None
        return record

    def _expire(self) -> None:
        # Insertion order is last-seen order: the expired ones are at the front.
        horizon = self._clock() - self._ttl
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if oldest.last_seen >= horizon:
                break
            self._sessions.popitem(last=False)

    async def record(self, session: str, delta: SessionDelta) -> None:
        self.add(session, delta)

    async def record_many(self, deltas: Mapping[str, SessionDelta]) -> None:
        for session, delta in deltas.items():
            self.add(session, delta)

    async def get(self, session: str) -> SessionRecord | None:
        return self.peek(session)

    async def close(self) -> None:
        self._sessions.clear()


class RedisStore:
    """Sessions on Redis: one HASH per session, updated in one MULTI, expiring `ttl` seconds
    after its last write. Fails fast (no client-side retries): the caller bounds the wait
    and falls back, and the connection pool reconnects on the next call."""

    def __init__(self, url: str, ttl: float, timeout: float) -> None:
        self._ttl = max(1, round(ttl))
        self.client: aioredis.Redis = aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0), health_check_interval=30)

    async def record(self, session: str, delta: SessionDelta) -> None:
        await self.record_many({session: delta})

    async def record_many(self, deltas: Mapping[str, SessionDelta]) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            for session, delta in deltas.items():
                key = KEY_PREFIX + session
                for channel, count in delta.violations.items():
                    pipe.hincrby(key, VIOLATION_PREFIX + channel, count)
                pipe.hincrby(key, "repairs_attempted", delta.repairs_attempted)
                pipe.hincrby(key, "repairs_succeeded", delta.repairs_succeeded)
                pipe.hsetnx(key, "first_seen", repr(delta.first_at or delta.at))
                pipe.eval(HMAX, 1, key, "last_seen", repr(delta.at),
                          "environment_errors", str(delta.environment_errors or 0))
                pipe.expire(key, self._ttl)
            await pipe.execute()

    async def get(self, session: str) -> SessionRecord | None:
        fields = await self.client.hgetall(KEY_PREFIX + session)
        return from_hash(session, fields) if fields else None

    async def close(self) -> None:
        await self.client.aclose()


def from_hash(session: str, fields: Mapping[bytes | str, bytes | str]) -> SessionRecord:
    text = {_text(k): _text(v) for k, v in fields.items()}
    violations = {k[len(VIOLATION_PREFIX):]: int(v) for k, v in text.items()
                  if k.startswith(VIOLATION_PREFIX) and int(v)}
    return SessionRecord(
        session=session, violations=violations,
        repairs_attempted=int(text.get("repairs_attempted", 0)),
        repairs_succeeded=int(text.get("repairs_succeeded", 0)),
        environment_errors=int(text.get("environment_errors", 0)),
        first_seen=float(text.get("first_seen", 0.0)),
        last_seen=float(text.get("last_seen", 0.0)),
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


Report = Callable[..., None]  # Telemetry.fallback: counts and logs
Count = Callable[[str], None]  # counts only, for the log lines a flood would repeat


class FallbackLog:
    """Counts every fallback; logs one line per kind per interval, saying how many it
    left out, so a Redis outage at thousands of requests per second does not flood."""

    def __init__(self, report: Report, count: Count, interval: float = FALLBACK_LOG_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._report = report
        self._count = count
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()

    def __call__(self, kind: str, **fields: Any) -> None:
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval:
            self._suppressed[kind] += 1
            self._count(kind)
            return
        self._last[kind] = now
        self._report(kind, suppressed=self._suppressed.pop(kind, 0), **fields)


def _ignore(kind: str, **fields: Any) -> None:
    """The default sink: a memory-only state has nothing to fall back from."""


class SessionState:
    """The sessions one app shares between its requests and its session route."""

    def __init__(self, local: MemoryStore, shared: SessionStore | None = None,
                 timeout: float = 0.05, fallback: Callable[..., None] = _ignore,
                 max_background: int = MAX_BACKGROUND_WRITES) -> None:
        self.local = local
        self.shared = shared
        self.timeout = timeout
        self._fallback = fallback
        self._max_background = max_background
        self._pending: OrderedDict[str, SessionDelta] = OrderedDict()
        # Redis writes wait here, merged per session, for the one writer task: under load
        # one MULTI carries many requests (the client's cost is per call, not per field).
        self._queued: dict[str, SessionDelta] = {}
        self._batch: dict[str, SessionDelta] | None = None  # the MULTI being written
        self._writer: asyncio.Task[None] | None = None

    # -- per request: accumulate the attempts, write once at the outcome ------------------

    def saw(self, request_id: str, channel: str) -> None:
        if channel != Channel.OK:
            self._delta(request_id).violations[channel] += 1

    def tried(self, request_id: str) -> None:
        """A fix, re-ask or constrained attempt ran: this request attempted a repair."""
        self._delta(request_id).repairs_attempted = 1

    def _delta(self, request_id: str) -> SessionDelta:
        delta = self._pending.get(request_id)
        if delta is None:
            delta = self._pending[request_id] = SessionDelta()
            if len(self._pending) > PENDING_REQUESTS:
                self._pending.popitem(last=False)
        return delta

    def finish(self, request_id: str, session: str, outcome: Outcome | None,
               environment_errors: int | None = None) -> None:
        """The request is over (`outcome` None: it was abandoned): one write per request."""
        delta = self._pending.pop(request_id, None) or SessionDelta()
        delta.repairs_succeeded = int(bool(delta.repairs_attempted) and outcome is not None
                                      and outcome.startswith("fixed_by_"))
        delta.environment_errors = environment_errors
        delta.at = round(time.time(), 3)
        self.local.add(session, delta)
        if self.shared is not None:
            self._write_soon(session, delta)

    def abandon(self, request_id: str, session: str) -> None:
        """The client left before the outcome: what its attempts showed still counts."""
        if request_id in self._pending:
            self.finish(request_id, session, None)

    def _write_soon(self, session: str, delta: SessionDelta) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a synchronous caller): local state only
            self._fallback(UNAVAILABLE, op="write", reason="no_event_loop", session=session)
            return
        queued = self._queued.get(session)
        if queued is not None:
            queued.merge(delta)
        elif len(self._queued) >= self._max_background:
            self._fallback(UNAVAILABLE, op="write", reason="backlog", session=session)
            return
        else:
            self._queued[session] = delta
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write())

    async def _write(self) -> None:
        assert self.shared is not None
        while self._queued:
            sessions = list(itertools.islice(self._queued, BATCH_SESSIONS))
            self._batch = {session: self._queued.pop(session) for session in sessions}
            try:
                async with asyncio.timeout(self.timeout):
                    await self.shared.record_many(self._batch)
            except Exception as exc:  # Redis's or ours: the writer must outlive it
                self._lost(self._batch, _reason(exc))
            self._batch = None

    def _lost(self, deltas: Mapping[str, SessionDelta], reason: str) -> None:
        """Kept locally, not on Redis: one counted fallback per request, as if unmerged."""
        for session, delta in deltas.items():
            for _ in range(delta.requests):
                self._fallback(UNAVAILABLE, op="write", reason=reason, session=session)

    # -- the session route ------------------------------------------------------------------

    async def read(self, session: str) -> tuple[SessionRecord | None, StateSource]:
        """Redis's record when it answers within `timeout`, else this process's own."""
        if self.shared is None:
            return self.local.peek(session), "local"
        try:
            async with asyncio.timeout(self.timeout):
                return await self.shared.get(session), "shared"
        except (TimeoutError, RedisError, OSError, ValueError) as exc:
            self._fallback(UNAVAILABLE, op="read", reason=_reason(exc), session=session)
            return self.local.peek(session), "local"

    @property
    def writes_in_flight(self) -> int:
        """Requests whose Redis write is queued or being written."""
        waiting = [*self._queued.values(), *(self._batch or {}).values()]
        return sum(delta.requests for delta in waiting)

    async def flush(self, drain: float | None = None) -> None:
        """Waits for the queued writes, `drain` seconds at most (default: a little more
        than `timeout`, which bounds each MULTI anyway)."""
        if self._writer is not None and not self._writer.done():
            await asyncio.wait({self._writer},
                               timeout=self.timeout + DRAIN_SLACK if drain is None else drain)

    async def close(self, drain: float | None = None) -> None:
        await self.flush(drain)
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        # Lost to Redis, kept locally: counted fallbacks like the others.
        self._lost(self._queued, "shutdown")
        self._lost(self._batch or {}, "shutdown")
        self._queued, self._batch = {}, None
        if self.shared is not None:
            await self.shared.close()


def _reason(exc: BaseException) -> str:
    return "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__


def memory_state(ttl: float = DEFAULT_TTL) -> SessionState:
    return SessionState(MemoryStore(ttl))


def session_state(url: str, ttl: float, timeout: float, report: Report = _ignore,
                  count: Count = lambda kind: None) -> SessionState:
    """`memory`, or a Redis URL (redis://, rediss://, unix://). Opens nothing yet: the
    first request connects, so a proxy starts even while Redis is down."""
    local = MemoryStore(ttl)
    if url == "memory":
        return SessionState(local, timeout=timeout)
    return SessionState(local, RedisStore(url, ttl, timeout), timeout,
                        FallbackLog(report, count))
