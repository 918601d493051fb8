"""The BFCL bench end to end: BFCL's real handler (its CLI, in .venv-bfcl) → reflexguard →
a scripted upstream on loopback → BFCL's real checker → records → the report.

The upstream is a fake, so everything here is labelled SIMULATED; no model runs. About a
minute: BFCL's CLI takes ~11 s to start and runs twice per arm (generate, evaluate) in the
one run the module shares, made in its own process from the end of collection on
(pipeline_run.py); the resumes start it never (nothing new to generate or score).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.bfcl.harness import HarnessError, bfcl_python, scores_complete
from bench.bfcl.runner import RunOptions, project_root, run
from bench.bfcl.store import CaseStore
from bench.tau2.cells import CellsConfig, Endpoint, ModelEntry, Precision
from tests.bench.bfcl import pipeline_run
from tests.fakes.fake_upstream import (
    FakeUpstream,
    Scripted,
    text_completion,
    tool_call_completion,
)
from tests.fakes.threaded_upstream import threaded_fake

ROOT = Path(__file__).resolve().parents[3]
# simple_python_0 and _1 and irrelevance_0, with their questions' telltale words.
TRIANGLE, FACTORIAL = "area of a triangle with a base of 10", "factorial of 5"
IRRELEVANT = "base is 10 meters"
CASES = {"simple_python": ["simple_python_0", "simple_python_1"], "irrelevance": ["irrelevance_0"]}


def scripted(body: dict[str, Any]) -> Scripted:
    """The triangle right at once; the factorial under a name that does not exist, then
    right when re-asked (the conversation then holds the failed attempt); irrelevance_0
    (a BMI tool for a triangle question) declined in words."""
    messages = body["messages"]
    question = next(str(m.get("content")) for m in messages if m.get("role") == "user")
    reasked = any(m.get("role") == "assistant" for m in messages)
    if IRRELEVANT in question:
        return Scripted(completion=text_completion("None of the tools computes an area."))
    if TRIANGLE in question:
        return Scripted(completion=tool_call_completion(
            "calculate_triangle_area", {"base": 10, "height": 5}))
    if FACTORIAL in question:
        name = "math_factorial" if reasked else "compute_factorial"
        return Scripted(completion=tool_call_completion(name, {"number": 5}))
    return Scripted(completion=text_completion("no script for this question"))


def fake_cells(url: str) -> CellsConfig:
    return CellsConfig(models=[ModelEntry(name="scripted", family="scripted fake upstream",
                                          precisions=[Precision(
                                              label="fake (SIMULATED upstream)", reference=True,
                                              endpoint=Endpoint(base_url=url,
                                                                model="fake-upstream"))])])


def options(out: Path, resume: bool = False) -> RunOptions:
    # parallel_cells: the threaded path (one cell here) is the one the real runs take.
    return RunOptions(out=out, arms=["off", "on"], categories=["simple_python", "irrelevance"],
                      resume=resume, cases=CASES, parallel_cells=not resume)


@pytest.fixture(scope="module")
def bfcl_run() -> tuple[Path, FakeUpstream, list[Any]]:
    """The run's folder, a fake holding the requests the run's fake received, and the
    records run() stored (what it returns: CaseStore.load of the same file)."""
    try:
        bfcl_python(ROOT)
    except HarnessError as exc:
        pytest.fail(f"{exc} (scripts/test.sh does)")
    started = pipeline_run.start()  # when collection ended (conftest.py), or now
    code, output = started.wait()
    assert code == 0, output
    fake = FakeUpstream(default=scripted)
    fake.requests.extend(started.requests())
    return started.out, fake, CaseStore(started.out / "cases.jsonl").load()


def test_bfcl_checker_scores_what_reflexguard_returned(
        bfcl_run: tuple[Path, FakeUpstream, list[Any]]) -> None:
    _, _, records = bfcl_run
    by = {(r.arm, r.case_id): r for r in records}
    assert len(records) == 6
    assert by["off", "simple_python_0"].correct and by["on", "simple_python_0"].correct
    # Observe mode passes the invented name through; BFCL's checker rejects it.
    off = by["off", "simple_python_1"]
    assert not off.correct and off.error_type and "wrong_func_name" in off.error_type
    assert off.first_attempt_channels == {"unknown_tool": 1}
    assert off.unknown_tool_names == {"compute_factorial": 1}
    assert off.extra_upstream_calls == 0
    # The ladder re-asks once and BFCL scores the repaired call right.
    on = by["on", "simple_python_1"]
    assert on.correct and on.extra_upstream_calls == 1 and on.outcomes == {"fixed_by_reask": 1}
    assert on.input_tokens > off.input_tokens  # usage summed over both attempts
    assert by["off", "irrelevance_0"].correct and by["on", "irrelevance_0"].correct
    assert all(r.simulated for r in records)


def test_requests_carry_the_case_and_the_generation_cap(
        bfcl_run: tuple[Path, FakeUpstream, list[Any]]) -> None:
    _, fake, _ = bfcl_run
    # BFCL sends no max_tokens; the model server's cap sets it, re-asks keep their own.
    assert fake.requests and all(r.get("max_tokens") for r in fake.requests)
    assert sum(1 for r in fake.requests if r["max_tokens"] == 512) == 6
    assert all(r.get("store") is False or "store" not in r for r in fake.requests)


def test_report_counts_fixed_cases_and_rebuilds_identically(
        bfcl_run: tuple[Path, FakeUpstream, list[Any]]) -> None:
    out, _, _ = bfcl_run
    summary = json.loads((out / "summary.json").read_text())
    cell = "scripted@fake"
    repair = summary["repair"][cell]
    assert repair["simple_python"]["fixed"] == ["simple_python_1"]
    assert repair["simple_python"]["broken"] == []
    assert summary["accuracy"]["simple_python"][cell]["off"]["correct"] == 1
    assert summary["accuracy"]["simple_python"][cell]["on"]["correct"] == 2
    assert summary["irrelevance"][cell]["verdict"] == "equal"
    assert summary["cost"][cell]["extra_upstream_calls"] == 1
    report = (out / "report.md").read_text()
    assert "SIMULATED" in report and "simple_python_1" in report
    before = {p.name: p.read_bytes() for p in out.iterdir()
              if p.suffix in (".json", ".md", ".html", ".png")}
    for name in before:
        (out / name).unlink()
    done = subprocess.run([sys.executable, "-m", "bench.bfcl.report", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    after = {name: (out / name).read_bytes() for name in before}
    assert after == before
    assert {n for n in before if n.endswith(".png")} >= {"bfcl_accuracy.png",
                                                       "bfcl_channels.png"}


def test_resume_keeps_records_and_regenerates_nothing(
        bfcl_run: tuple[Path, FakeUpstream, list[Any]]) -> None:
    out, _, records = bfcl_run
    with threaded_fake(FakeUpstream(default=scripted)) as (fake, url):
        again = run(fake_cells(url), options(out, resume=True), simulated=True)
    assert fake.calls == 0
    assert [r.model_dump() for r in again] == [r.model_dump() for r in records]


def test_a_resumed_arm_with_every_answer_scored_reads_bfcls_scores_without_evaluating(
        bfcl_run: tuple[Path, FakeUpstream, list[Any]]) -> None:
    """The arm's records were lost (a run stopped after BFCL scored it, before they were
    stored): the resume rebuilds them from BFCL's own result and score files, the same
    records, and neither generates nor starts BFCL's checker again (its log unchanged)."""
    out, _, records = bfcl_run
    cells = fake_cells("http://127.0.0.1:1")  # never asked
    entry, precision = cells.models[0], cells.models[0].precisions[0]
    project = project_root(out, entry, precision, "on")
    assert scores_complete(project, list(CASES))
    log = (project / "evaluate.log").read_bytes()
    store = out / "cases.jsonl"
    kept = store.read_text()
    store.write_text("".join(line + "\n" for line in kept.splitlines()
                             if json.loads(line)["arm"] != "on"))
    try:
        with threaded_fake(FakeUpstream(default=scripted)) as (fake, url):
            again = run(fake_cells(url), options(out, resume=True), simulated=True)
        assert fake.calls == 0
        assert (project / "evaluate.log").read_bytes() == log
        on = [r.model_dump() for r in again if r.arm == "on"]
        assert on == [r.model_dump() for r in records if r.arm == "on"]
        assert sum(1 for r in again if r.correct and r.arm == "on") == 3  # read from BFCL
    finally:
        store.write_text(kept)


def test_scores_that_miss_an_answer_are_evaluated_again(
        bfcl_run: tuple[Path, FakeUpstream, list[Any]], tmp_path: Path) -> None:
    """A score file from before the last answers, or cut off while written, is not taken
    as complete: the resume then runs BFCL's checker (the runner's other branch)."""
    out, _, _ = bfcl_run
    cells = fake_cells("http://127.0.0.1:1")
    project = project_root(out, cells.models[0], cells.models[0].precisions[0], "off")
    copy = tmp_path / "project"
    subprocess.run(["cp", "-r", str(project), str(copy)], check=True)
    assert scores_complete(copy, list(CASES))
    score = next(copy.rglob("BFCL_v4_simple_python_score.json"))
    lines = score.read_text().splitlines()
    assert len(lines) == 2  # the header and simple_python_1, failed in observe mode
    score.write_text(lines[0] + "\n")  # its failed entry lost
    assert not scores_complete(copy, list(CASES))
    header = json.loads(lines[0])
    score.write_text(json.dumps({**header, "total_count": 1, "correct_count": 1}) + "\n")
    assert not scores_complete(copy, list(CASES))  # scored before simple_python_1 was saved
    score.unlink()
    assert not scores_complete(copy, list(CASES))
