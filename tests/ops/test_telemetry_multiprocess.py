"""Telemetry across processes: one /metrics sum over workers' files, one valid events file.

Every "worker" here is a real process with PROMETHEUS_MULTIPROC_DIR set before it imports
anything, as `serve --workers` starts them (cli/pool.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reflexguard.ops.events import read_event
from reflexguard.ops.telemetry import Telemetry, multiprocess_dir

COUNT_ONCE = """
import sys
from reflexguard.core.channels import Channel
from reflexguard.core.attempts import Attempt
from reflexguard.core.model import CallVerdict, Reply, Verdict
from reflexguard.ops.telemetry import Telemetry

telemetry = Telemetry()
verdict = Verdict(calls=(CallVerdict(channel=Channel.UNKNOWN_TOOL, index=0, name="t"),))
telemetry.attempt(Attempt(1, "initial", {}, (Reply(),), (verdict,), 0.01), "r", None, "m",
                  "h", False)
telemetry.fallback("probe")
if sys.argv[1:] == ["scrape"]:
    sys.stdout.write(telemetry.metrics_text().decode())
"""

WRITE_LINES = """
import os, sys, time
from pathlib import Path
from reflexguard.ops.telemetry import Telemetry, configure_logging

configure_logging("warning")  # the file is under test, not the log
writer, lines, go = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
telemetry = Telemetry(Path(sys.argv[4]))
while not go.exists():  # every writer starts together, so their writes overlap
    time.sleep(0.001)
for seq in range(lines):
    size = 1 + (seq * 7919 + writer * 104729) % 200_000  # 1 B to 200 KB, varied
    telemetry.fallback("load", writer=writer, seq=seq, blob="x" * size)
telemetry.close()
"""


def run(script: str, shared: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    return subprocess.run([sys.executable, "-c", script, *args], env=env, text=True,
                          capture_output=True, timeout=120, check=True)


def value(metrics: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(prefix))


def test_a_counter_once_in_each_of_two_workers_reads_two(tmp_path: Path) -> None:
    run(COUNT_ONCE, tmp_path)
    run(COUNT_ONCE, tmp_path)
    # The scraper counts once too: three in all, its own registry not added a second time.
    metrics = run(COUNT_ONCE, tmp_path, "scrape").stdout
    assert value(metrics, 'reflexguard_fallbacks_total{kind="probe"}') == 3.0
    assert value(metrics, 'reflexguard_tool_calls_total{channel="unknown_tool"') == 3.0
    assert value(metrics, "reflexguard_upstream_seconds_count") == 3.0
    assert value(metrics, 'reflexguard_upstream_seconds_bucket{le="0.01"}') == 3.0


def test_a_dead_workers_counts_stay_in_the_sum(tmp_path: Path) -> None:
    run(COUNT_ONCE, tmp_path)  # a worker that ran and is gone
    from prometheus_client.multiprocess import mark_process_dead

    for name in os.listdir(tmp_path):  # what the pool does for every dead pid
        mark_process_dead(int(name.rsplit("_", 1)[1].split(".")[0]), str(tmp_path))
    metrics = run(COUNT_ONCE, tmp_path, "scrape").stdout
    assert value(metrics, 'reflexguard_fallbacks_total{kind="probe"}') == 2.0


def test_a_directory_set_after_import_is_not_trusted(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    # This process imported prometheus_client with in-memory values: its counts would
    # never reach the directory, so telemetry keeps its own registry.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert multiprocess_dir() is None
    telemetry = Telemetry()
    telemetry.fallback("probe")
    assert 'reflexguard_fallbacks_total{kind="probe"} 1.0' in telemetry.metrics_text().decode()
    assert os.listdir(tmp_path) == []


def test_events_stay_one_valid_line_each_under_concurrent_writers(tmp_path: Path) -> None:
    writers, lines = 4, 150
    events, go = tmp_path / "events.jsonl", tmp_path / "go"
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    processes = [subprocess.Popen([sys.executable, "-c", WRITE_LINES, str(writer), str(lines),
                                   str(go), str(events)], env=env)
                 for writer in range(writers)]
    go.touch()
    assert [process.wait(300) for process in processes] == [0] * writers
    seen: dict[int, list[int]] = {writer: [] for writer in range(writers)}
    with events.open("rb") as file:
        for raw in file:
            record = json.loads(raw)  # a torn or interleaved line fails here
            read_event(raw)
            assert len(record["blob"]) == 1 + (record["seq"] * 7919
                                               + record["writer"] * 104729) % 200_000
            seen[record["writer"]].append(record["seq"])
    assert {writer: sorted(seqs) for writer, seqs in seen.items()} == \
        {writer: list(range(lines)) for writer in range(writers)}
