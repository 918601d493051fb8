"""reflexguard installs beside the current agent frameworks (issue 19).

A library imported into an agent must declare compatible ranges: with exact pins in its
metadata, pip backtracked pydantic-ai to 0.3.6, and `pydantic-ai==2.62.0` was
ResolutionImpossible (google-genai wants tenacity<9.2.0). This test asks pip, against the
package index CI reaches (PyPI), to resolve reflexguard's own metadata -- no constraints
file -- beside each framework at or above the release the issue was filed against.
It downloads metadata only (`--dry-run`), so it needs the network: marked `network`,
still part of CI. pip runs in its own process from the end of collection on
(tests/frameworks/resolution.py), beside the tests before this one.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.frameworks.resolution import EXCLUDED, FRAMEWORKS, start


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


@pytest.mark.network
def test_reflexguard_resolves_beside_current_frameworks() -> None:
    # Started when collection ended (tests/frameworks/conftest.py), or now.
    resolution = start()
    code, output = resolution.wait()
    assert code == 0, output
    resolved = {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
        for item in json.loads(resolution.report.read_text())["install"]
    }
    named = {name: resolved.get(name) for name in ("reflexguard", *FRAMEWORKS)}
    print("resolved:", ", ".join(f"{name}=={version}" for name, version in named.items()))
    for name, floor in FRAMEWORKS.items():
        version = named[name]
        assert version is not None, f"{name} missing from the resolution"
        assert _version(version) >= _version(floor), (name, version)
        assert version not in EXCLUDED.get(name, ()), (name, version)
    assert named["reflexguard"] is not None
