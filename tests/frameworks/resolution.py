"""pip's resolution of reflexguard's own metadata beside the frameworks (test_metadata.py),
started in its own process when collection ends, so that its minute or so, mostly waits on
the package index, runs beside the tests collected before it instead of in front of them.

The command and what the test asserts about its answer are unchanged; only when it starts
is. A resolution nobody waited for is killed when the session ends.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.background import Background, launch

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
class Resolution(Background):
    @property
    def report(self) -> Path:
        return self.directory / "report.json"


_started: list[Resolution] = []


def start() -> Resolution:
    """The resolution, started once per session (later calls return the same one)."""
    if _started:
        return _started[0]
    wanted = [f"{name}>={floor}" + "".join(f",!={bad}" for bad in EXCLUDED.get(name, ()))
              for name, floor in FRAMEWORKS.items()]
    _started.append(launch(Resolution, "rg-resolution-", "pip.log", TIMEOUT_S, lambda d: [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
        "--report", str(d / "report.json"), str(ROOT), *wanted]))
    return _started[0]


def stop() -> None:
    """At the session's end: a resolution still running is killed, its files removed."""
    for resolution in _started:
        resolution.stop()
    _started.clear()
