"""The bench's statistics, on hand-made records."""

from __future__ import annotations

import math
from collections import Counter

from bench.records import Cell, EpisodeRecord, ToolCallRecord
from bench.stats import analysis
from bench.tau2.classify import env_channel

CELL = Cell(model="m", family="f", precision="Q4", reference=True, domain="mock")


def record(reward: float, errors: int, task: str = "t", arm: str = "off",
           calls: list[ToolCallRecord] | None = None, infra: str | None = None) -> EpisodeRecord:
    made = calls if calls is not None else [
        ToolCallRecord(turn=i, name="x", error=True, channel="unknown_tool")
        for i in range(errors)]
    return EpisodeRecord(cell=CELL, arm=arm, task_id=task, trial=0, seed=1,  # type: ignore[arg-type]
                         termination_reason="user_stop", reward=reward,
                         infrastructure_error=infra, agent_turns=len(made), calls=made)


def test_success_at_budget_is_reward_and_fewer_errors_than_k() -> None:
    three = record(1.0, 3)
    assert [analysis.succeeds_at(three, k) for k in (1, 3, 4, 10)] == [False, False, True, True]
    assert not analysis.succeeds_at(record(0.0, 0), 10)
    assert not analysis.succeeds_at(record(1.0, 0, infra="JSONDecodeError: x"), 10)


def test_success_curve_counts_infrastructure_errors_as_failures() -> None:
    records = [record(1.0, 0), record(1.0, 2), record(0.0, 0, infra="boom")]
    curve = analysis.success_curve(records)
    assert (curve[1].successes, curve[3].successes, curve[3].n) == (1, 2, 3)


def test_wilson_matches_known_values() -> None:
    rate = analysis.wilson(0, 10)
    assert rate.low == 0 and math.isclose(rate.high, 0.2775, abs_tol=1e-4)
    half = analysis.wilson(5, 10)
    assert math.isclose(half.low, 0.2366, abs_tol=1e-4)
    assert math.isclose(half.high, 0.7634, abs_tol=1e-4)


def test_recovery_within_two_agent_turns() -> None:
    calls = [ToolCallRecord(turn=0, name="a", error=True, channel="unknown_tool"),
             ToolCallRecord(turn=2, name="b", error=False),
             ToolCallRecord(turn=3, name="c", error=True, channel="domain_error"),
             ToolCallRecord(turn=6, name="d", error=False)]
    rate = analysis.recovery([record(0.0, 0, calls=calls)])
    assert (rate.successes, rate.n) == (1, 2)


def test_channel_rates_amplification_and_malformed_crashes() -> None:
    ref = [record(1.0, 1, calls=[ToolCallRecord(turn=0, name="x", error=True,
                                                channel="unknown_tool"),
                                 ToolCallRecord(turn=1, name="y", error=False)])]
    low = [record(0.0, 2, calls=[ToolCallRecord(turn=i, name="x", error=True,
                                                channel="unknown_tool") for i in range(2)]),
           record(0.0, 0, calls=[], infra="JSONDecodeError: Expecting value")]
    ref_rates, low_rates = analysis.env_channel_rates(ref), analysis.env_channel_rates(low)
    assert ref_rates.per_call("unknown_tool") == 0.5
    assert low_rates.calls == 3 and low_rates.counts["malformed_args"] == 1
    ratios = analysis.amplification(ref_rates, low_rates)
    assert math.isclose(ratios["unknown_tool"] or 0, (2 / 3) / 0.5)
    assert ratios["malformed_args"] == math.inf and ratios["domain_error"] is None


def test_holm_is_monotone_and_bounded() -> None:
    adjusted = analysis.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == {"a": 0.03, "c": 0.06, "b": 0.06}
    assert analysis.holm({"x": 0.9, "y": 0.8}) == {"y": 1.0, "x": 1.0}


def test_fisher_detects_amplification_only_when_real() -> None:
    assert analysis.fisher_greater(40, 100, 10, 100) < 0.001
    assert analysis.fisher_greater(10, 100, 10, 100) > 0.5


def test_name_overlap() -> None:
    ref = Counter({"complete_task": 10, "delete_tasks": 5, "task_2": 1})
    low = Counter({"complete_task": 20, "delete_tasks": 9, "task_2": 3, "items": 1})
    overlap = analysis.name_overlap(ref, low)
    assert overlap.spearman is not None and overlap.spearman > 0.7
    assert (overlap.lower_new, overlap.lower_total) == (1, 33)
    assert analysis.name_overlap(Counter({"a": 1}), Counter()).spearman is None


def test_paired_repair_effect() -> None:
    off = [record(1.0, 3, task=f"t{i}") for i in range(4)]
    on = [record(1.0, 0, task=f"t{i}", arm="on") for i in range(4)]
    effect = analysis.repair_effect(on, off, budget=2)
    assert effect is not None and effect.difference == 1.0 and effect.pairs == 4
    assert effect.low == 1.0 and effect.high == 1.0
    assert analysis.repair_effect(on, [], budget=2) is None


def test_env_channel_classification() -> None:
    users = frozenset({"toggle_airplane_mode"})
    assert env_channel("Error: Tool 'x' not found.", "x", users) == "unknown_tool"
    assert env_channel("Error: Tool 'toggle_airplane_mode' not found.",
                       "toggle_airplane_mode", users) == "wrong_side_tool"
    assert env_channel("Error: f() missing 1 required positional argument: 'a'", "f",
                       users) == "argument_error"
    assert env_channel("Error: f() got an unexpected keyword argument 'b'", "f",
                       users) == "argument_error"
    assert env_channel("Error: Order not found", "f", users) == "domain_error"


def test_the_documented_vllm_cells_file_is_valid() -> None:
    from pathlib import Path

    from bench.tau2.cells import load_cells

    config = load_cells(Path(__file__).parents[3] / "docs" / "cells.vllm.yaml")
    cells = config.cells(["retail", "telecom"])
    assert len(cells) == 6 and sum(cell.reference for _, _, cell in cells) == 2
    assert config.user.kind == "llm"


def test_events_reader_reads_only_new_complete_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json as _json

    from bench.tau2.runner import EventsReader

    def outcome(session: str, n: int) -> dict[str, object]:
        return {"event": "outcome", "ts": float(n), "outcome": "exhausted",
                "request_id": f"r{n}", "session": session}

    path = tmp_path / "events.jsonl"
    reader = EventsReader(path)
    assert reader("a") == []
    second = _json.dumps(outcome("b", 2))
    path.write_text(_json.dumps(outcome("a", 1)) + "\n" + second[:20])
    assert reader("a") == [outcome("a", 1)] and reader("b") == []
    with path.open("a") as handle:
        handle.write(second[20:] + "\n" + _json.dumps(outcome("a", 3)) + "\n")
    assert reader("b") == [outcome("b", 2)]
    assert [e["ts"] for e in reader("a")] == [1.0, 3.0]


def test_events_written_by_telemetry_are_read_back_through_the_same_types(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from reflexguard.ops.events import read_event
    from reflexguard.ops.telemetry import Telemetry

    path = tmp_path / "events.jsonl"
    telemetry = Telemetry(path)
    telemetry.outcome("fixed_by_reask", ["repair_upstream_error"], "r1", "s1")
    telemetry.close()
    events = [read_event(line) for line in path.read_bytes().splitlines()]
    assert [e["event"] for e in events] == ["outcome", "fallback"]
    assert events[1]["kind"] == "repair_upstream_error"


def test_success_uses_tau2s_tolerance() -> None:
    from bench.records import EpisodeRecord

    fields = EpisodeRecord.model_fields
    assert "reward" in fields
    record = EpisodeRecord.model_construct(reward=1.0 - 1e-9, infrastructure_error=None)
    assert record.success
    assert not EpisodeRecord.model_construct(reward=0.999, infrastructure_error=None).success
