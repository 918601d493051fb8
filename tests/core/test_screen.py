"""The screen's arithmetic: decisions from events, calibration bins, per-group rates."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from reflexguard.core.screen import (
    CalibrationError,
    decisions_of,
    parse_calibration,
    screen,
)
from reflexguard.core.screen_report import screen_json, screen_markdown

FIXTURE = Path(__file__).parents[1] / "cli/fixtures/TEST_FIXTURE_margin_calibration.json"


def calibration_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def attempt(kind: str, *calls: dict[str, Any]) -> dict[str, Any]:
    return {"event": "attempt", "kind": kind, "calls": list(calls)}


def call(name: str | None, channel: str = "ok", margin: float | None = None,
         margins: bool = True) -> dict[str, Any]:
    record: dict[str, Any] = {"channel": channel, "name": name, "detail": ""}
    if margins:
        record.update(name_margin=margin, call_margin=None)
    return record


def test_bins_cover_the_line_with_open_ends() -> None:
    calibration = parse_calibration(calibration_data())
    assert calibration.simulated is True
    assert calibration.bin_for(-5.0).error_rate == 0.6  # type: ignore[union-attr]
    assert calibration.bin_for(0.5).error_rate == 0.3  # type: ignore[union-attr]  # lo inclusive
    assert calibration.bin_for(1e9).error_rate == 0.02  # type: ignore[union-attr]


@pytest.mark.parametrize("change", [
    {"schema": "other"}, {"bins": []}, {"bins": [{"lo": 1, "hi": 0, "n": 1, "flip_rate": 0,
                                                  "error_rate": 0}]},
    {"bins": [{"lo": None, "hi": None, "n": 1, "flip_rate": 2, "error_rate": 0}]},
    {"bins": [{"lo": None, "hi": None, "n": -1, "flip_rate": 0, "error_rate": 0}]},
    {"thin_threshold": "low"},
])
def test_a_broken_calibration_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(CalibrationError):
        parse_calibration({**calibration_data(), **change})


def test_decisions_are_the_initial_attempts_calls() -> None:
    events = [attempt("initial", call("a", margin=0.2), call("b", "unknown_tool", math.inf)),
              attempt("reask", call("a", margin=9.0)), attempt("fix", call("a", margin=9.0)),
              {"event": "outcome", "outcome": "clean"}, attempt("initial", "junk")]  # type: ignore[arg-type]
    decisions = decisions_of(events)
    assert [(d.tool, d.channel, d.name_margin) for d in decisions] == [
        ("a", "ok", 0.2), ("b", "unknown_tool", None)]


def test_predicted_rates_average_the_bins_of_known_margins() -> None:
    calibration = parse_calibration(calibration_data())
    reference = decisions_of([attempt(
        "initial", call("get", margin=0.2), call("get", margin=2.0), call("get", margin=None),
        call("cancel", "hallucinated_name", margin=5.0))])
    result = screen(reference, calibration, threshold=1.0)
    get = next(r for r in result.by_tool if r.key == "get")
    assert (get.decisions, get.measured, get.thin) == (3, 2, 1)
    assert get.predicted_error_rate == pytest.approx((0.6 + 0.1) / 2)
    assert get.predicted_flip_rate == pytest.approx((0.5 + 0.05) / 2)
    assert result.overall.predicted_error_rate == pytest.approx((0.6 + 0.1 + 0.02) / 3)
    assert result.overall.reference_errors == 1
    channels = {r.key: r for r in result.by_channel}
    assert channels["hallucinated_name"].predicted_error_rate == pytest.approx(0.02)


def test_a_candidate_run_is_set_beside_the_prediction() -> None:
    calibration = parse_calibration(calibration_data())
    reference = decisions_of([attempt("initial", call("get", margin=0.2), call("get", margin=4))])
    candidate = decisions_of([attempt(
        "initial", call("get", margins=False), call("gte", "unknown_tool", margins=False),
        call("get", "schema_violation", margins=False), call("get", margins=False))])
    result = screen(reference, calibration, 1.0, candidate)
    assert result.overall.candidate_error_rate == pytest.approx(2 / 4)
    tools = {r.key: r for r in result.by_tool}
    assert tools["get"].candidate_error_rate == pytest.approx(1 / 3)
    assert tools["gte"].decisions == 0 and tools["gte"].candidate_errors == 1
    channels = {r.key: r for r in result.by_channel}
    assert channels["ok"].candidate_error_rate == pytest.approx(2 / 4)  # share in channel
    assert channels["unknown_tool"].candidate_error_rate == pytest.approx(1 / 4)


def test_reports_say_a_simulated_calibration_is_simulated() -> None:
    calibration = parse_calibration(calibration_data())
    result = screen(decisions_of([attempt("initial", call("get", margin=0.2))]), calibration, 1.0)
    markdown = screen_markdown(result, {"reference": "ref.jsonl", "calibration": "c.json"})
    assert "SIMULATED" in markdown.splitlines()[0]
    data = screen_json(result, {})
    assert data["simulated_calibration"] is True
    assert data["calibration"]["bins"][0]["lo"] is None
    assert data["overall"]["predicted_error_rate"] == pytest.approx(0.6)
    json.dumps(data, allow_nan=False)  # strict JSON: no infinities
