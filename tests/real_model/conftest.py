"""The embedded model servers, started once per test session and variant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reflexguard.embedded.child import ModelServer, model_server

LOWER_VARIANT = "Q2_K"


@pytest.fixture(scope="session")
def q4_server() -> Iterator[ModelServer]:
    with model_server("Q4_K_M", n_ctx=4096) as server:
        yield server


@pytest.fixture(scope="session")
def lower_server() -> Iterator[ModelServer]:
    with model_server(LOWER_VARIANT, n_ctx=4096) as server:
        yield server
