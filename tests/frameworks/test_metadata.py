"""reflexguard installs beside the current agent frameworks (issue 19).

A library imported into an agent must declare compatible ranges: with exact pins in its
metadata, pip backtracked pydantic-ai to 0.3.6, and `pydantic-ai==2.62.0` was
ResolutionImpossible (google-genai wants tenacity<9.2.0). This test asks pip, against the
package index CI reaches (PyPI), to resolve reflexguard's own metadata -- no constraints
file -- beside each framework at or above the release the issue was filed against.
It downloads metadata only (`--dry-run`), so it needs the network: marked `network`,
still part of CI.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

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


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


@pytest.mark.network
def test_reflexguard_resolves_beside_current_frameworks(tmp_path: Path) -> None:
    wanted = [
        f"{name}>={floor}" + "".join(f",!={bad}" for bad in EXCLUDED.get(name, ()))
        for name, floor in FRAMEWORKS.items()
    ]
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
         "--quiet", "--report", str(report), str(ROOT), *wanted],
        capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    resolved = {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    named = {name: resolved.get(name) for name in ("reflexguard", *FRAMEWORKS)}
    print("resolved:", ", ".join(f"{name}=={version}" for name, version in named.items()))
    for name, floor in FRAMEWORKS.items():
        version = named[name]
        assert version is not None, f"{name} missing from the resolution"
        assert _version(version) >= _version(floor), (name, version)
        assert version not in EXCLUDED.get(name, ()), (name, version)
    assert named["reflexguard"] is not None
