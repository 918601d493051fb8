"""The BFCL pipeline tests' one generated run (test_bfcl_pipeline.py), in its own process,
started when collection ends (tests/bench/bfcl/conftest.py).

Its minute and a half, mostly BFCL's CLI starting four times, then passes beside the tests
collected before the pipeline's (on a 2-core machine pytest keeps one core busy). The run
is the module's own: `python -m tests.bench.bfcl.pipeline_run DIR` runs the scripted fake,
`bench.bfcl.runner.run` with the module's options and `build_bfcl_report`, into DIR/bfcl,
and writes the requests the fake received to DIR/fake-requests.json (outside the run's
folder, whose files the report test rebuilds).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.background import Background, launch

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 900.0  # a bound on a hang: each BFCL command has its own (bench/bfcl/harness.py)


@dataclass
class Started(Background):
    @property
    def out(self) -> Path:
        return self.directory / "bfcl"

    def requests(self) -> list[dict[str, object]]:
        loaded: list[dict[str, object]] = json.loads(
            (self.directory / "fake-requests.json").read_text())
        return loaded


_started: list[Started] = []


def start() -> Started:
    """The run, started once per session (later calls return the same one)."""
    if not _started:
        _started.append(launch(Started, "rg-bfcl-pipeline-", "run.log", TIMEOUT_S, lambda d: [
            sys.executable, "-m", "tests.bench.bfcl.pipeline_run", str(d)], cwd=ROOT))
    return _started[0]


def stop_all() -> None:
    """At the session's end: a run nobody waited for is killed, its files removed."""
    for started in _started:
        started.stop()
    _started.clear()


def main(directory: Path) -> None:
    # The module's own script and options (imported here: the test module imports this one).
    from bench.bfcl.runner import run
    from bench.report.bfcl_writer import build_bfcl_report
    from tests.bench.bfcl.test_bfcl_pipeline import fake_cells, options, scripted
    from tests.fakes.fake_upstream import FakeUpstream
    from tests.fakes.threaded_upstream import threaded_fake

    out = directory / "bfcl"
    with threaded_fake(FakeUpstream(default=scripted)) as (fake, url):
        run(fake_cells(url), options(out), simulated=True)
    build_bfcl_report(out)
    (directory / "fake-requests.json").write_text(json.dumps(fake.requests))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
