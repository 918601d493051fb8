"""The three arms (off, on, on+budget): how each is configured, and the report of them.

The pipeline tests use the SIMULATED agent through tau2's real orchestrator and
evaluator (no model runs, no proxy: the arms are labels there, so their curves must be
equal). The last test puts a real reflexguard per arm in front of a scripted fake model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.compare import REPAIR_CHOICES, parser
from bench.records import Arm, Cell
from bench.report.writer import build_report
from bench.tau2.cells import DEFAULT, CellsConfig, Endpoint, ModelEntry, Precision, simulated_cells
from bench.tau2.runner import (
    RunOptions,
    agent_headers,
    events_path,
    proxy_settings,
    run,
)
from reflexguard.core.budget import BUDGET_HEADER
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion
from tests.fakes.threaded_upstream import threaded_fake

pytestmark = pytest.mark.tau2
TASKS = ["create_task_1", "update_task_1"]
ARMS: list[Arm] = ["off", "on", "on+budget"]
CELL = Cell(model="m", family="f", precision="Q4 x", reference=True, domain="mock")


def test_repair_choices_name_the_arms() -> None:
    assert parser().parse_args([]).repair == "all"
    assert REPAIR_CHOICES["all"] == ARMS
    assert REPAIR_CHOICES["both"] == ["off", "on"]  # its meaning from before the budget arm
    assert REPAIR_CHOICES["on+budget"] == ["on+budget"]


def test_only_the_budget_arm_tells_the_proxy_its_budget() -> None:
    from tau2.run import load_tasks

    from bench.tau2.episode import EpisodeSpec

    task = load_tasks("mock")[0]
    headers = {arm: agent_headers(EpisodeSpec(cell=CELL, arm=arm, task=task, trial=0, seed=1,
                                              max_errors=3))
               for arm in ARMS}
    assert headers["on+budget"][BUDGET_HEADER] == "3"
    assert BUDGET_HEADER not in headers["on"] and BUDGET_HEADER not in headers["off"]
    assert len({h["x-reflexguard-session"] for h in headers.values()}) == 3


def test_every_arm_measures_margins_into_its_own_events_file(tmp_path: Path) -> None:
    precision = DEFAULT.models[0].precisions[0]
    settings = {arm: proxy_settings(DEFAULT, precision, CELL, arm, "http://127.0.0.1:1/v1",
                                    None, events_path(tmp_path, CELL, arm), margins=True)
                for arm in ARMS}
    assert {arm: s.repair for arm, s in settings.items()} == {
        "off": False, "on": True, "on+budget": True}
    assert all(s.margins for s in settings.values())
    # The budget arm differs from `on` only by what the agent sends (a header).
    assert settings["on"].error_budget is None and settings["on+budget"].error_budget is None
    files = [s.events for s in settings.values()]
    assert len(set(files)) == 3
    assert all(f is not None and f.parent == tmp_path / "events" for f in files)
    quiet = proxy_settings(DEFAULT, precision, CELL, "on+budget", "http://127.0.0.1:1/v1",
                           None, events_path(tmp_path, CELL, "on+budget"))
    assert not quiet.margins and quiet.repair  # off unless asked: costly on llama.cpp


def test_margins_and_model_threads_flags() -> None:
    args = parser().parse_args([])
    assert (args.margins, args.model_threads) == ("off", None)
    args = parser().parse_args(["--margins", "on", "--model-threads", "1"])
    assert (args.margins, args.model_threads) == ("on", 1)
    done = subprocess.run([sys.executable, "-m", "bench.compare", "--model-threads", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "bench.compare: error: --model-threads must be at least 1")


def test_three_arms_at_k3_simulated(tmp_path: Path) -> None:
    # Four injected errors at K=3: tau2 ends every lower episode at its third error.
    records = run(simulated_cells(["argument_error"] * 4), RunOptions(
        out=tmp_path, arms=ARMS, domains=["mock"], task_ids=TASKS, max_errors=3))
    assert len(records) == 2 * 2 * 3 and all(r.simulated for r in records)
    assert {r.max_errors for r in records} == {3}
    summary = build_report(tmp_path)
    lower = next(k for k in summary["success_at_k"] if "lower" in k)
    reference = next(k for k in summary["success_at_k"] if "reference" in k)
    assert summary["arms"] == ARMS and summary["max_errors"] == 3
    for arm in ARMS:
        assert sorted(summary["success_at_k"][lower][arm]) == ["1", "2", "3"]
        assert [summary["success_at_k"][reference][arm][k]["rate"] for k in "123"] == [1.0] * 3
        assert [summary["success_at_k"][lower][arm][k]["rate"] for k in "123"] == [0.0] * 3
        spent = summary["budget_spent"][lower][arm]
        assert (spent["n"], spent["mean"], spent["distribution"], spent["exhausted"]) == (
            2, 3.0, {"3": 2}, 2)
        assert summary["budget_spent"][reference][arm]["distribution"] == {"0": 2}
    assert set(summary["arm_effects"][lower]) == {"on − off", "on+budget − off",
                                                  "on+budget − on"}
    assert summary["spend_difference"][lower]["on+budget − on"]["difference"] == 0.0
    report = (tmp_path / "report.md").read_text()
    assert "SIMULATED AGENT" in report and "## Budget spent per episode" in report
    assert "| K=1 | K=2 | K=3 |" in report and "K=4" not in report
    assert f"| {lower} | on+budget | 2 | 3.00 [3.00, 3.00] | 3.0 | 3: 2 | 2 | 2 |" in report
    assert summary["budget_spent"][reference]["on+budget"]["low_budget_episodes"] == 0
    assert "No events files: no proxy ran (simulated agent)." in report
    assert (tmp_path / "budget_spent.png").stat().st_size > 1000


def test_success_at_every_k_from_a_k10_run_simulated(tmp_path: Path) -> None:
    run(simulated_cells(["unknown_tool"] * 2), RunOptions(
        out=tmp_path, arms=ARMS, domains=["mock"], task_ids=TASKS[:1]))
    summary = build_report(tmp_path)
    lower = next(k for k in summary["success_at_k"] if "lower" in k)
    for arm in ARMS:
        curve = summary["success_at_k"][lower][arm]
        assert [curve[str(k)]["rate"] for k in range(1, 11)] == [0.0] * 2 + [1.0] * 8
        assert summary["budget_spent"][lower][arm]["exhausted"] == 0


def test_the_report_rebuilds_at_the_runs_own_k_and_refuses_a_higher_one(tmp_path: Path) -> None:
    run(simulated_cells(["unknown_tool"]), RunOptions(
        out=tmp_path, arms=["on+budget"], domains=["mock"], task_ids=TASKS[:1], max_errors=3))
    command = [sys.executable, "-m", "bench.report", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["max_errors"] == 3
    refused = subprocess.run([*command, "--max-errors", "10"], capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2 and "ran at K=3" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_each_arm_runs_behind_its_own_reflexguard(tmp_path: Path) -> None:
    """A SIMULATED model (fake upstream) that always calls a tool that does not exist."""

    def always_unknown(_: dict[str, Any]) -> Scripted:
        return Scripted(tool_call_completion("complete_task", {"task_id": "task_1"}))

    with threaded_fake(FakeUpstream(default=always_unknown)) as (fake, base_url):
        config = CellsConfig(max_repairs=1, models=[ModelEntry(
            name="fake", family="fake (SIMULATED model)", precisions=[Precision(
                label="fake", reference=True,
                endpoint=Endpoint(base_url=base_url, model="fake-upstream"))])])
        records = run(config, RunOptions(out=tmp_path, arms=ARMS, domains=["mock"],
                                         task_ids=TASKS[:1], max_errors=2,
                                         episode_timeout=120))
    assert fake.calls > 0
    by_arm = {r.arm: r for r in records}
    assert set(by_arm) == set(ARMS)
    for arm, record in by_arm.items():
        assert record.proxy.events_file == f"events/fake@fake_mock-{arm}.jsonl"
        assert (tmp_path / record.proxy.events_file).is_file()
        assert record.proxy.outcomes, arm  # the session header joined the events
        assert record.error_count <= 2
    assert set(by_arm["off"].proxy.outcomes) == {"observed"}
    assert "observed" not in by_arm["on"].proxy.outcomes
    assert "observed" not in by_arm["on+budget"].proxy.outcomes
    # The header reached the proxy: with one failure left it passes no invalid call on.
    assert by_arm["on"].error_count == 2 and by_arm["on"].termination_reason == "too_many_errors"
    assert by_arm["on+budget"].error_count < 2
    summary = build_report(tmp_path)
    cell = next(iter(summary["outcomes"]))
    assert summary["events_files"][cell]["on+budget"] == ["events/fake@fake_mock-on+budget.jsonl"]
    assert "events/fake@fake_mock-on+budget.jsonl" in (tmp_path / "report.md").read_text()


def test_off_and_on_recomputed_at_k3_equal_a_run_at_k3_simulated(tmp_path: Path) -> None:
    from bench.stats import analysis

    cells = simulated_cells(["unknown_tool"] * 4)
    large = run(cells, RunOptions(out=tmp_path / "k10", arms=["off", "on"], domains=["mock"],
                                  task_ids=TASKS))
    small = run(cells, RunOptions(out=tmp_path / "k3", arms=ARMS, domains=["mock"],
                                  task_ids=TASKS, max_errors=3))
    for arm in ("off", "on"):
        for cell in {r.cell.key for r in large}:
            at10 = [r for r in large if r.arm == arm and r.cell.key == cell]
            at3 = [r for r in small if r.arm == arm and r.cell.key == cell]
            assert analysis.budget_spent(at10, 3) == analysis.budget_spent(at3)
            assert analysis.success_curve(at10, 3) == analysis.success_curve(at3, 3)
    done = subprocess.run([sys.executable, "-m", "bench.report.at_budget", str(tmp_path / "k10"),
                           str(tmp_path / "k3")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lower = next(k for k in {r.cell.key for r in small} if "lower" in k)
    assert f"**{lower}**, K=3" in done.stdout
    assert (f"| off | {tmp_path / 'k10'}, recomputed at K=3 | 0/2 [0–66%] | 0/2 [0–66%] | "
            "0/2 [0–66%] | 3.00 [3.00, 3.00] | 3: 2 | 2 | 2 |") in done.stdout
    assert f"| on+budget | {tmp_path / 'k3'}, run at K=3 |" in done.stdout


def test_a_run_of_one_arm_calls_no_lower_cell_a_reference(tmp_path: Path) -> None:
    """Without a repair-off arm damage cannot be assessed: the report says so instead of
    calling the lower-precision cell a reference."""
    run(simulated_cells(["unknown_tool"]), RunOptions(
        out=tmp_path, arms=["on+budget"], domains=["mock"], task_ids=TASKS[:1], max_errors=3))
    summary = build_report(tmp_path)
    lower = next(k for k in summary["success_at_k"] if "lower" in k)
    reference = next(k for k in summary["success_at_k"] if "reference" in k)
    assert summary["references"] == [reference]
    verdicts = {line.split(".**")[0].removeprefix("**"): line
                for line in (tmp_path / "report.md").read_text().splitlines()
                if line.startswith("**")}
    assert "Reference precision." in verdicts[reference]
    assert "Reference precision." not in verdicts[lower]
    assert "Damage not assessed" in verdicts[lower]
