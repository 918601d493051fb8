"""The BFCL pipeline tests' generated run starts when collection ends, in its own process
(tests/bench/bfcl/pipeline_run.py), beside the tests before them; it stops with the session."""

from __future__ import annotations

import pytest

from tests.bench.bfcl import pipeline_run


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.path.name == "test_bfcl_pipeline.py" for item in session.items):
        pipeline_run.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    pipeline_run.stop_all()
