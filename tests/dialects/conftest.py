"""Every dialect test reads with a known-tools cache of its own (dialects/known_tools.py):
what one test taught it never decides another's road."""

from __future__ import annotations

import pytest

from reflexguard.dialects import reader
from reflexguard.dialects.known_tools import KnownTools


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> KnownTools:
    known = KnownTools()
    monkeypatch.setattr(reader, "KNOWN_TOOLS", known)
    return known
