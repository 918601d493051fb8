"""The distributions are built and installed when collection ends, in their own process
(tests/packaging/install_run.py), beside the tests before them; the job stops with the session."""

from __future__ import annotations

import pytest

from tests.packaging import install_run


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.path.name == "test_distributions.py" for item in session.items):
        install_run.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    install_run.stop_all()
