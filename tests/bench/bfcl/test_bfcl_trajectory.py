"""The multi-turn trajectories table (bench/stats/bfcl_trajectory.py) and the on+loop arm's
settings: what the loop guard's measurement reads."""

from __future__ import annotations

from typing import Any

from bench.bfcl.runner import proxy_settings
from bench.stats.bfcl_records import CaseRecord
from bench.stats.bfcl_trajectory import force_terminated, trajectories, trajectory_table
from bench.tau2.cells import CellsConfig, ModelEntry, Precision

FORCED = ("{'error_message': ['Model was force-terminated during inference phase.'], "
          "'error_type': 'multi_turn:force_terminated'}")


def record(arm: str, case: str, **fields: Any) -> CaseRecord:
    return CaseRecord(model="m", family="f", precision="Q4_K_M (as shipped)", reference=True,
                      arm=arm, category=fields.pop("category", "multi_turn_base"),  # type: ignore[arg-type]
                      case_id=case, correct=fields.pop("correct", False), **fields)


def test_force_terminated_cases_requests_tokens_and_repeats_per_arm() -> None:
    records = [
        record("on", "a", error=FORCED, requests=20, input_tokens=90_000),
        record("on", "b", requests=4, input_tokens=10_000, correct=True),
        record("on+loop", "a", requests=8, input_tokens=30_000, extra_upstream_calls=3,
               repeated_calls={"replaced": 2, "kept": 1}),
        record("on+loop", "b", requests=4, input_tokens=10_000, correct=True),
        record("off", "x", category="simple_python", requests=1),  # not multi-turn
    ]
    table = trajectories(records)
    on, loop = table["m@Q4_K_M"]["on"], table["m@Q4_K_M"]["on+loop"]
    assert list(table["m@Q4_K_M"]) == ["on", "on+loop"]
    assert (on["cases"], on["correct"], on["force_terminated"]) == (2, 1, 1)
    assert (on["requests_per_case"], on["input_tokens_per_case"]) == (12.0, 50_000.0)
    assert (loop["force_terminated"], loop["extra_calls_per_case"]) == (0, 1.5)
    assert loop["repeated_calls"] == {"kept": 1, "replaced": 2}
    assert loop["cases_with_repeats"] == 1
    lines = trajectory_table(table)
    assert any("| on+loop | 2 | 1 | 0 |" in line and "kept 1, replaced 2" in line
               for line in lines)


def test_only_the_checkers_force_termination_counts() -> None:
    assert force_terminated(record("on", "a", error=FORCED))
    assert not force_terminated(record("on", "a", error="Model response list is empty"))
    assert trajectory_table({}) == ["No multi-turn case was run.", ""]


def test_the_on_loop_arm_runs_the_ladder_and_the_loop_guard(tmp_path: Any) -> None:
    precision = Precision(label="Q4_K_M (as shipped)", reference=True, embedded="Q4_K_M")
    config = CellsConfig(models=[ModelEntry(name="m", family="f", precisions=[precision])])
    settings = {arm: proxy_settings(config, precision, arm, "http://127.0.0.1:1/v1", None,
                                    tmp_path / "e.jsonl")
                for arm in ("off", "on", "on+loop")}
    assert [(s.repair, s.loop_guard) for s in settings.values()] == [
        (False, "off"), (True, "off"), (True, "repair")]
