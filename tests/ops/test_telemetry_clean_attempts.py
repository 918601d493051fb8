"""Clean attempts are counted and recorded but not logged; everything else is logged.

docs/decisions.md ("Clean attempts are not logged"): the log is for what went wrong, so a
first attempt whose every call is ok, with nothing fixed and no internal event, gets no
log line; its count and its events-file line stay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from reflexguard.core.attempts import Attempt, AttemptKind
from reflexguard.core.channels import Channel
from reflexguard.core.margins import CallMargin
from reflexguard.core.model import CallVerdict, Reply, Verdict
from reflexguard.ops.telemetry import Telemetry


def attempt(channel: Channel = Channel.OK, kind: AttemptKind = "initial",
            fixes: tuple[str, ...] = (), note: str | None = None) -> Attempt:
    verdict = Verdict(calls=(CallVerdict(channel=channel, index=0, name="t", note=note),))
    return Attempt(1 if kind == "initial" else 2, kind, {}, (Reply(),), (verdict,), 0.01,
                   fixes)


def logged(telemetry: Telemetry, record: Attempt, **more: Any) -> list[Any]:
    with capture_logs() as logs:
        telemetry.attempt(record, "rg-1", None, "m", "hash", False, **more)
        telemetry.outcome("clean", [], "rg-1", None)
    return logs


def ok_calls(telemetry: Telemetry) -> float:
    for line in telemetry.metrics_text().decode().splitlines():
        if line.startswith('reflexguard_tool_calls_total{channel="ok"'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_clean_first_attempt_is_counted_and_recorded_but_not_logged(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    telemetry = Telemetry(path)
    assert logged(telemetry, attempt()) == []
    assert ok_calls(telemetry) == 1.0
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["event"], e["calls"][0]["channel"]) for e in events] == [("attempt", "ok")]
    telemetry.close()


def test_without_an_events_file_a_clean_attempt_is_still_counted() -> None:
    telemetry = Telemetry()
    assert logged(telemetry, attempt()) == []
    assert logged(telemetry, attempt()) == []
    assert ok_calls(telemetry) == 2.0


def test_a_violation_is_logged() -> None:
    logs = logged(Telemetry(), attempt(Channel.UNKNOWN_TOOL))
    assert [(e["event"], e["calls"][0]["channel"]) for e in logs] == [
        ("attempt", "unknown_tool")]


def test_a_fixed_or_repeated_attempt_is_logged_even_when_its_calls_are_ok() -> None:
    assert [e["kind"] for e in logged(Telemetry(), attempt(kind="fix", fixes=("x",)))] == [
        "fix"]
    assert [e["kind"] for e in logged(Telemetry(), attempt(kind="reask"))] == ["reask"]


def test_an_internal_event_logs_both_the_attempt_and_its_fallback() -> None:
    logs = logged(Telemetry(), attempt(note="validator_error"))
    assert sorted((e["event"], e.get("kind")) for e in logs) == [
        ("attempt", "initial"), ("fallback", "validator_error")]


def test_a_thin_margin_is_logged() -> None:
    margin = CallMargin(index=0, name="t", name_margin=0.1, call_margin=0.1)
    logs = logged(Telemetry(), attempt(), margins=[margin], margin_threshold=1.0)
    assert [e["calls"][0].get("thin_margin") for e in logs] == [True]
    assert logged(Telemetry(), attempt(), margins=[margin], margin_threshold=0.05) == []


def test_the_clean_answer_shortcut_records_what_attempt_and_outcome_record(
        tmp_path: Path) -> None:
    """call.py's shortcut for an all-ok first answer must leave the same trace as the
    ladder's path: the events line, the count, no log line, the session's record."""
    traces = []
    for shortcut in (False, True):
        path = tmp_path / f"events-{shortcut}.jsonl"
        telemetry = Telemetry(path)
        with capture_logs() as logs:
            if shortcut:
                telemetry.clean_answer(("t",), "rg-1", "s1", "m", "hash", False, "chat", 0.01, 2)
            else:
                telemetry.attempt(attempt(), "rg-1", "s1", "m", "hash", False)
                telemetry.outcome("clean", [], "rg-1", "s1", environment_errors=2)
        events = [{k: v for k, v in json.loads(line).items() if k != "ts"}
                  for line in path.read_text().splitlines()]
        record = telemetry.sessions.local.peek("s1")
        assert record is not None
        traces.append((logs, ok_calls(telemetry), events,
                       record.model_dump(exclude={"first_seen", "last_seen"})))
        telemetry.close()
    assert traces[0] == traces[1]
    assert traces[1][1] == 1.0 and len(traces[1][2]) == 1
