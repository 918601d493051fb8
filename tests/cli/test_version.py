"""`reflexguard --version`: the installed distribution's version, one line, exit 0."""

from __future__ import annotations

from importlib import metadata

import pytest

import reflexguard
from reflexguard.cli.main import installed_version, main


def test_version_prints_the_distributions_version_and_exits_0(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"reflexguard {metadata.version('reflexguard')}\n"


def test_the_package_and_its_metadata_agree_on_the_version() -> None:
    # pyproject reads the version from reflexguard.__version__ (one source).
    assert installed_version() == reflexguard.__version__

