"""The Redis store against a real redis-server on loopback: one HASH per session, written
in one MULTI, with a TTL; two stores (two replicas) sum into the same record; Redis down
or silent is a counted fallback to local state within the timeout; it reconnects."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from reflexguard.ops.loopback import free_port
from reflexguard.ops.state import (
    KEY_PREFIX,
    UNAVAILABLE,
    RedisStore,
    SessionDelta,
    SessionState,
    session_state,
)
from tests.redis_server import RedisServer, SilentServer

HANG_GUARD = 30.0  # fails a hung test instead of blocking CI; not a measured figure


def delta(at: float, errors: int = 0, **violations: int) -> SessionDelta:
    return SessionDelta(Counter(violations), 1, 1, errors, at)


class Fallbacks:
    def __init__(self) -> None:
        self.logged: list[dict[str, Any]] = []
        self.counted = 0

    def report(self, kind: str, **fields: Any) -> None:
        assert kind == UNAVAILABLE
        self.counted += 1
        self.logged.append(fields)

    def count(self, kind: str) -> None:
        assert kind == UNAVAILABLE
        self.counted += 1


async def test_a_session_is_one_hash_with_a_ttl(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, ttl=3600, timeout=2)
    await store.record("ep-1", delta(100.0, 2, unknown_tool=1))
    await store.record("ep-1", delta(90.0, 1, unknown_tool=1, empty_reply=1))
    record = await store.get("ep-1")
    assert record is not None
    assert record.violations == {"unknown_tool": 2, "empty_reply": 1}
    assert (record.repairs_attempted, record.repairs_succeeded) == (2, 2)
    # Both only rise: a replica with a late clock or a shorter conversation lowers neither.
    assert (record.environment_errors, record.last_seen, record.first_seen) == (2, 100.0, 100.0)
    assert redis_server.command("TYPE", KEY_PREFIX + "ep-1") == b"+hash\r\n"
    ttl = int(redis_server.command("TTL", KEY_PREFIX + "ep-1")[1:].strip())
    assert 0 < ttl <= 3600
    assert await store.get("never") is None
    await store.close()


async def test_two_replicas_sum_into_one_record(redis_server: RedisServer) -> None:
    one = RedisStore(redis_server.url, ttl=60, timeout=2)
    two = RedisStore(redis_server.url, ttl=60, timeout=2)
    await asyncio.gather(*(store.record("shared", delta(float(i), unknown_tool=1))
                           for i in range(50) for store in (one, two)))
    first, second = await one.get("shared"), await two.get("shared")
    assert first is not None and first == second
    assert first.violations == {"unknown_tool": 100} and first.repairs_attempted == 100
    await one.close()
    await two.close()


async def test_redis_down_falls_back_to_local_state_and_counts() -> None:
    fallbacks = Fallbacks()
    state = session_state(f"redis://127.0.0.1:{free_port()}/0", 60, 0.5, fallbacks.report,
                          fallbacks.count)
    async with asyncio.timeout(HANG_GUARD):
        state.saw("r1", "unknown_tool")
        state.finish("r1", "s", "exhausted")
        await state.flush()
        record, source = await state.read("s")
    assert source == "local" and record is not None
    assert record.violations == {"unknown_tool": 1}
    assert fallbacks.counted == 2  # the write and the read
    assert [f["op"] for f in fallbacks.logged] == ["write"]  # the read's line rate-limited
    await state.close()


async def test_a_silent_redis_never_holds_a_write_or_read_past_the_timeout(
        silent_redis: SilentServer) -> None:
    fallbacks = Fallbacks()
    state = session_state(silent_redis.url, 60, 0.2, fallbacks.report, fallbacks.count)
    async with asyncio.timeout(HANG_GUARD):
        for number in range(3):
            state.finish(f"r{number}", "s", "clean")
        assert state.writes_in_flight == 3  # finish() returned without waiting on Redis
        await state.flush()
        assert state.writes_in_flight == 0
        record, source = await state.read("s")
    assert source == "local" and record is not None
    assert fallbacks.counted == 4
    await state.close()


async def test_writes_past_the_backlog_stay_local_and_are_counted(
        silent_redis: SilentServer) -> None:
    fallbacks = Fallbacks()
    state = SessionState(session_state("memory", 60, 1).local,
                         RedisStore(silent_redis.url, 60, 5), timeout=5,
                         fallback=fallbacks.report, max_background=2)
    for number in range(5):
        state.finish(f"r{number}", f"s{number}", "clean")
    state.finish("r5", "s0", "clean")  # merged into s0's queued write: no more room needed
    assert state.writes_in_flight == 3 and fallbacks.counted == 3
    assert all(state.local.peek(f"s{number}") for number in range(5))  # all kept locally
    await state.close(drain=0)
    assert fallbacks.counted == 6  # the three requests dropped at shutdown too


async def test_it_reconnects_when_redis_comes_back(redis_server: RedisServer) -> None:
    fallbacks = Fallbacks()
    state = session_state(redis_server.url, 60, 1, fallbacks.report, fallbacks.count)
    async with asyncio.timeout(HANG_GUARD):
        state.finish("r1", "s", "exhausted")
        await state.flush()
        redis_server.stop()
        state.finish("r2", "s", "exhausted")
        await state.flush()
        assert (await state.read("s"))[1] == "local"
        redis_server.start()  # same port, empty: the outage's writes are lost, said so
        state.tried("r3")
        state.finish("r3", "s", "fixed_by_reask")
        await state.flush()
        record, source = await state.read("s")
    assert source == "shared" and record is not None
    assert (record.repairs_attempted, record.repairs_succeeded) == (1, 1)
    assert fallbacks.counted == 2  # the write and the read during the outage
    await state.close()


async def test_back_to_back_requests_share_one_multi(redis_server: RedisServer) -> None:
    state = session_state(redis_server.url, 60, 2)
    for number in range(100):
        state.saw(f"r{number}", "unknown_tool")
        state.finish(f"r{number}", f"s{number % 10}", "exhausted", environment_errors=number)
    assert state.writes_in_flight == 100
    async with asyncio.timeout(HANG_GUARD):
        await state.flush()
        records = [(await state.read(f"s{n}"))[0] for n in range(10)]
    assert all(r is not None and r.violations == {"unknown_tool": 10} for r in records)
    assert [r.environment_errors for r in records if r] == list(range(90, 100))
    # Redis's own count: the hundred requests queued before the writer ran went as one.
    stats = redis_server.command("INFO", "commandstats").decode()
    assert "cmdstat_multi:calls=1," in stats and "cmdstat_exec:calls=1," in stats
    await state.close()
