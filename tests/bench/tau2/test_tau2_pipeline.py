"""The bench end to end through tau2's real orchestrator and evaluator, simulated agent.

Everything produced here is marked simulated; no model runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report.writer import build_report
from bench.tau2.cells import simulated_cells
from bench.tau2.runner import RunOptions, run
from bench.tau2.scripted_user import ScriptedUser

pytestmark = pytest.mark.tau2
# Tasks whose gold actions earn reward 1 when replayed by the simulated agent.
TASKS = ["create_task_1", "update_task_1", "impossible_task_1"]


def run_simulated(out: Path, errors: list[str], **options: object) -> list:  # type: ignore[type-arg]
    return run(simulated_cells(errors), RunOptions(out=out, arms=["off"], domains=["mock"],
                                                   task_ids=TASKS, **options))  # type: ignore[arg-type]


def test_three_injected_errors_give_the_exact_success_curve(tmp_path: Path) -> None:
    records = run_simulated(tmp_path, ["unknown_tool"] * 3, trials=3)
    summary = build_report(tmp_path)
    assert summary["simulated"] is True
    lower = next(k for k in summary["success_at_k"] if "lower" in k)
    reference = next(k for k in summary["success_at_k"] if "reference" in k)
    curve = summary["success_at_k"][lower]["off"]
    assert [curve[str(k)]["rate"] for k in range(1, 11)] == [0.0] * 3 + [1.0] * 7
    assert all(summary["success_at_k"][reference]["off"][str(k)]["rate"] == 1.0
               for k in range(1, 11))
    assert all(r.simulated for r in records)
    assert {r.error_count for r in records if "lower" in r.cell.precision} == {3}
    assert summary["damaged"][lower] is True
    assert summary["hallucinated_names"][lower]["lower_counts"] == {"complete_task": 27}
    report = (tmp_path / "report.md").read_text()
    assert "SIMULATED" in report
    assert "SIMULATED" in (tmp_path / "report.html").read_text()
    for plot in ("success_vs_k.png", "channel_rates.png", "hallucinated_names.png"):
        assert (tmp_path / plot).stat().st_size > 1000


def test_budget_exhaustion_ends_the_episode_with_too_many_errors(tmp_path: Path) -> None:
    records = run_simulated(tmp_path, ["argument_error"] * 4, max_errors=3)
    lower = [r for r in records if "lower" in r.cell.precision]
    assert {r.termination_reason for r in lower} == {"too_many_errors"}
    assert {r.reward for r in lower} == {0.0}
    assert all(c.channel == "argument_error" for r in lower for c in r.calls if c.error)


def test_resume_skips_finished_episodes_and_report_rebuilds(tmp_path: Path) -> None:
    first = run_simulated(tmp_path, ["unknown_tool"])
    again = run(simulated_cells(["unknown_tool"]),
                RunOptions(out=tmp_path, arms=["off"], domains=["mock"], task_ids=TASKS,
                           resume=True))
    assert len(again) == len(first) == 6
    build_report(tmp_path)
    before = json.loads((tmp_path / "summary.json").read_text())
    (tmp_path / "summary.json").unlink()
    result = subprocess.run([sys.executable, "-m", "bench.report.writer", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "summary.json").read_text()) == before


def assert_one_line(args: list[str], code: object, stderr: str) -> None:
    assert code == 2, (args, stderr)
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("bench.compare: error:"), (args, stderr)
    assert "Traceback" not in stderr


def test_cli_mistakes_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "episodes.jsonl").write_text("")
    # Refused by the argument checks, before the heavy imports: each its own process.
    for args in (["--tasks", "0"], ["--domains", "nowhere"],
                 ["--simulated-agent", "nonsense"]):
        result = subprocess.run([sys.executable, "-m", "bench.compare", *args],
                                capture_output=True, text=True, timeout=120)
        assert_one_line(args, result.returncode, result.stderr)
    # Refused after importing tau2 and the report writer (~9 s of CPU per process): the
    # same `main` over the three command lines in one fresh interpreter, which catches
    # SystemExit only (tests/bench/tau2/compare_cases.py).
    late = [
        ["--cells", str(tmp_path / "missing.yaml")],
        ["--simulated-agent", "unknown_tool", "--out", str(tmp_path)],
        ["--simulated-agent", "unknown_tool", "--task-ids", "no_such_task",
         "--out", str(tmp_path / "new")],
    ]
    result = subprocess.run([sys.executable, "-m", "tests.bench.tau2.compare_cases",
                             json.dumps(late)], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    outcomes = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["args"] for o in outcomes] == late
    for outcome in outcomes:
        assert_one_line(outcome["args"], outcome["code"], outcome["stderr"])


def test_scripted_user_is_deterministic() -> None:
    from tau2.run import load_tasks


    task = load_tasks("retail")[0]
    user = ScriptedUser(task)
    assert user.reply_to("Hi! How can I help you today?").startswith("Hi. I received my order")
    assert user.reply_to("Can you tell me your name and zip code?").startswith(
        "Here is what I know: I am Yusuf Rossi")
    assert user.reply_to("Shall I proceed with the exchange?") == "Yes, please go ahead."
    assert user.reply_to("Your exchange is done.") == "###STOP###"
