"""Session state without Redis: the record, the local store's bounds, one write per request,
the rate-limited fallback log, and the `--state` setting."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from reflexguard.core.attempts import Attempt, AttemptKind
from reflexguard.core.channels import Channel
from reflexguard.core.model import CallVerdict, Reply, Verdict
from reflexguard.ops.config import Settings
from reflexguard.ops.state import (
    UNAVAILABLE,
    FallbackLog,
    MemoryStore,
    SessionDelta,
    SessionState,
    from_hash,
)
from reflexguard.ops.telemetry import Telemetry


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def delta(at: float, errors: int | None = None, **violations: int) -> SessionDelta:
    return SessionDelta(Counter(violations), 1, 0, errors, at)


def attempt(*channels: Channel, kind: AttemptKind = "initial") -> Attempt:
    verdict = Verdict(calls=tuple(CallVerdict(channel=c, index=i, name="t")
                                  for i, c in enumerate(channels)))
    return Attempt(1 if kind == "initial" else 2, kind, {}, (Reply(),), (verdict,), 0.01)


def test_memory_store_accumulates_and_keeps_the_highest_environment_errors() -> None:
    clock = Clock()
    store = MemoryStore(ttl=60, clock=clock)
    store.add("s", delta(1000.0, 3, unknown_tool=1))
    store.add("s", delta(1001.5, 2, unknown_tool=1, schema_violation=2))
    record = store.peek("s")
    assert record is not None
    assert record.violations == {"unknown_tool": 2, "schema_violation": 2}
    assert (record.repairs_attempted, record.environment_errors) == (2, 3)
    assert (record.first_seen, record.last_seen) == (1000.0, 1001.5)


def test_merged_deltas_sum_counts_and_keep_the_extremes() -> None:
    first, second = delta(10.0, 3, unknown_tool=1), delta(12.0, None, unknown_tool=2)
    first.merge(second)
    first.merge(delta(11.0, 5, empty_reply=1))
    assert first.violations == {"unknown_tool": 3, "empty_reply": 1}
    assert (first.repairs_attempted, first.requests) == (3, 3)
    assert (first.environment_errors, first.first_at, first.at) == (5, 10.0, 12.0)


def test_memory_store_is_bounded_and_expires() -> None:
    clock = Clock()
    store = MemoryStore(ttl=60, capacity=3, clock=clock)
    for name in "abcd":
        store.add(name, delta(clock.now))
    assert store.peek("a") is None and store.peek("d") is not None
    clock.now += 61
    assert store.peek("d") is None  # past its TTL: gone even before it is evicted
    store.add("e", delta(clock.now))
    assert list(store._sessions) == ["e"]  # the expired ones were dropped on the write


def test_one_write_per_request_with_repairs_counted_by_outcome() -> None:
    state = SessionState(MemoryStore(ttl=60))
    state.saw("r1", Channel.UNKNOWN_TOOL)
    state.tried("r1")
    state.saw("r1", Channel.OK)  # valid calls are not violations
    state.saw("r1", Channel.UNKNOWN_TOOL)
    state.tried("r1")  # a second re-ask in one request: still one repair attempted
    state.finish("r1", "s", "fixed_by_reask", environment_errors=1)
    state.saw("r2", Channel.EMPTY_REPLY)
    state.tried("r2")
    state.finish("r2", "s", "exhausted")
    state.saw("r3", Channel.EMPTY_REPLY)
    state.finish("r3", "s", "exhausted")  # max_repairs 0: exhausted, nothing tried
    state.finish("r4", "s", "clean")
    record = state.local.peek("s")
    assert record is not None
    assert record.violations == {"unknown_tool": 2, "empty_reply": 2}
    assert (record.repairs_attempted, record.repairs_succeeded) == (2, 1)
    assert record.environment_errors == 1
    assert not state._pending


def test_an_abandoned_request_still_counts_what_it_saw() -> None:
    state = SessionState(MemoryStore(ttl=60))
    state.abandon("r0", "s")  # nothing seen: nothing written
    assert state.local.peek("s") is None
    state.saw("r1", Channel.SCHEMA_VIOLATION)
    state.abandon("r1", "s")
    record = state.local.peek("s")
    assert record is not None and record.violations == {"schema_violation": 1}
    assert record.repairs_attempted == 0


def test_telemetry_records_sessions_once_per_request(tmp_path: Path) -> None:
    telemetry = Telemetry(tmp_path / "events.jsonl")
    telemetry.attempt(attempt(Channel.UNKNOWN_TOOL, Channel.OK), "rg-1", "ep", "m", "h", False)
    assert telemetry.sessions.local.peek("ep") is None  # not before the outcome
    telemetry.attempt(attempt(Channel.OK, kind="reask"), "rg-1", "ep", "m", "h", False)
    telemetry.outcome("fixed_by_reask", [], "rg-1", "ep", environment_errors=4)
    telemetry.outcome("clean", [], "rg-2", None)  # no session: nothing recorded
    record = telemetry.sessions.local.peek("ep")
    assert record is not None
    assert record.model_dump(exclude={"first_seen", "last_seen"}) == {
        "session": "ep", "violations": {"unknown_tool": 1}, "repairs_attempted": 1,
        "repairs_succeeded": 1, "environment_errors": 4}
    telemetry.close()


def test_fallback_log_counts_every_one_and_logs_one_per_interval() -> None:
    clock = Clock()
    logged: list[tuple[str, dict[str, Any]]] = []
    counted: list[str] = []
    log = FallbackLog(lambda kind, **fields: logged.append((kind, fields)), counted.append,
                      interval=10, clock=clock)
    for _ in range(5):
        log(UNAVAILABLE, op="write")
    clock.now += 11
    log(UNAVAILABLE, op="read")
    assert [fields for _, fields in logged] == [
        {"suppressed": 0, "op": "write"}, {"suppressed": 4, "op": "read"}]
    assert counted == [UNAVAILABLE] * 4  # the four not logged were still counted


def test_a_redis_hash_reads_back_as_a_record() -> None:
    record = from_hash("s", {b"v:unknown_tool": b"2", b"v:schema_violation": b"0",
                             b"repairs_attempted": b"1", b"repairs_succeeded": b"1",
                             b"environment_errors": b"3", b"first_seen": b"10.5",
                             b"last_seen": b"12.25"})
    assert record.violations == {"unknown_tool": 2}
    assert (record.environment_errors, record.first_seen, record.last_seen) == (3, 10.5, 12.25)


@pytest.mark.parametrize("value", ["memory", "redis://127.0.0.1:6379/0", "redis://h",
                                   "rediss://:secret@cache.internal:6380/2",
                                   "unix:///run/redis.sock?db=1"])
def test_state_accepts_memory_and_redis_urls(value: str) -> None:
    assert Settings(state=value).state == value


@pytest.mark.parametrize("value", ["redis", "http://h:6379", "redis://", "redis://h:port/0",
                                   "redis://h/zero", "unix://", ""])
def test_state_refuses_anything_else(value: str) -> None:
    with pytest.raises(ValidationError, match="state"):
        Settings(state=value)


@pytest.mark.parametrize("flags", [["--state", "redis//h"], ["--state-timeout", "9"],
                                   ["--session-ttl", "0"]])
def test_bad_state_flags_are_one_line_errors(flags: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from reflexguard.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--upstream", "http://127.0.0.1:1/v1", *flags])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("reflexguard: error: invalid setting ") and error.count("\n") == 1
