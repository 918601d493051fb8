"""The capacity benchmark (bench.capacity, issue 34): its reading is pure arithmetic over
points, and one small real run drives every process over loopback sockets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.perf.capacity import Point, read_stamps
from bench.perf.capacity_report import added, streams_per_core


def point(kind: str, workers: int, c: int, firsts: list[float], errors: int = 0,
          scene: str = "text") -> Point:
    name = {"direct": "direct", "minimal": f"minimal-{workers}p"}.get(kind, f"rg-{workers}w")
    return Point(name, kind, workers, c, scene, firsts, [], 10, errors, 0.02, 0.5)


def test_added_is_each_quantile_minus_directs_at_the_same_point() -> None:
    rows = added([point("direct", 0, 50, [10.0] * 100),
                  point("reflexguard", 1, 50, [12.0] * 99 + [40.0])])
    (row,) = rows
    assert (row.p50, row.p99) == (2.0, 30.0)
    assert row.cpu_ms == 2.0  # 20 ms of CPU over 10 streams


def test_streams_per_core_is_the_largest_concurrency_within_the_goal_per_worker() -> None:
    points = [point("direct", 0, c, [1.0] * 10) for c in (50, 200, 1000)]
    points += [point("reflexguard", 2, 50, [2.0] * 10), point("reflexguard", 2, 200, [5.0] * 10),
               point("reflexguard", 2, 1000, [30.0] * 10)]
    rows = added(points)
    assert streams_per_core(rows, "reflexguard", 2) == (100.0, False)
    assert streams_per_core(rows, "reflexguard", 2, goal=100.0) == (500.0, True)
    assert streams_per_core(rows, "reflexguard", 2, goal=0.5) == (0.0, False)


def test_a_point_with_errors_is_over_capacity() -> None:
    rows = added([point("direct", 0, 50, [1.0]), point("minimal", 1, 50, [1.5], errors=3)])
    assert streams_per_core(rows, "minimal", 1) == (0.0, False)


def test_stamps_are_read_once_and_half_lines_skipped(tmp_path: Path) -> None:
    (tmp_path / "1.txt").write_text("7 100\n8 200\n9 ")
    assert read_stamps(tmp_path) == {"7": 100, "8": 200}
    assert read_stamps(tmp_path) == {}


def test_a_small_real_run_measures_every_target(tmp_path: Path) -> None:
    out = tmp_path / "capacity.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.capacity", "--concurrency", "4", "--gap-ms", "1",
         "--warm", "0.2", "--duration", "1", "--load-processes", "1",
         "--upstream-processes", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "SIMULATED" in run.stdout and "streams per core" in run.stdout
    points = json.loads(out.read_text())["points"]
    assert {p["target"] for p in points} == {"direct", "minimal-1p", "rg-1w"}
    text = [p for p in points if p["scene"] == "text"]
    assert all(p["first_text_ms_n"] > 0 and p["errors"] == 0 for p in text)
    call = [p for p in points if p["scene"] == "call"]
    assert all(p["hold_ms_n"] > 0 for p in call)  # every hold read against its stamp


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    run = subprocess.run([sys.executable, "-m", "bench.capacity", "--concurrency", "0"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
