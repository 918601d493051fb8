"""pip's resolution of reflexguard's own metadata beside the frameworks (test_metadata.py),
started in its own process when collection ends, so that its minute or so, mostly waits on
the package index, runs beside the tests collected before it instead of in front of them.

The command and what the test asserts about its answer are unchanged; only when it starts
is. A resolution nobody waited for is killed when the session ends.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 540.0  # pip's resolution may backtrack; a bound on a hang

# Floors: the releases issue 19 was filed against. Without them pip may "resolve" by
# backtracking a framework to an ancient release, which is the failure being tested.
FRAMEWORKS = {
    "openai-agents": "0.24.0",
    "langchain-openai": "1.7.4",
    "langgraph": "1.2.24",
    "pydantic-ai": "2.62.0",
    "litellm": "1.110.2",
}
# Compromised releases (the project's rule): never let a resolver pick them.
EXCLUDED = {"litellm": ("1.82.7", "1.82.8")}


@dataclass
class Resolution:
    process: subprocess.Popen[bytes]
    directory: Path

    @property
    def report(self) -> Path:
        return self.directory / "report.json"

    def wait(self) -> tuple[int, str]:
        """pip's exit status and the tail of its output (stdout and stderr together)."""
        try:
            code = self.process.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        return code, (self.directory / "pip.log").read_text(errors="replace")[-6000:]


_started: list[Resolution] = []


def start() -> Resolution:
    """The resolution, started once per session (later calls return the same one)."""
    if _started:
        return _started[0]
    directory = Path(tempfile.mkdtemp(prefix="rg-resolution-"))
    wanted = [f"{name}>={floor}" + "".join(f",!={bad}" for bad in EXCLUDED.get(name, ()))
              for name, floor in FRAMEWORKS.items()]
    with (directory / "pip.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
             "--quiet", "--report", str(directory / "report.json"), str(ROOT), *wanted],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _started.append(Resolution(process, directory))
    return _started[0]


def stop() -> None:
    """At the session's end: a resolution still running is killed, its files removed."""
    for resolution in _started:
        if resolution.process.poll() is None:
            resolution.process.kill()
            resolution.process.wait()
        shutil.rmtree(resolution.directory, ignore_errors=True)
    _started.clear()
