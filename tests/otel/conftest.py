"""A real OTLP/HTTP receiver per test module, the SDK's exporters pointed at it (and the
variables put back after the module, so no later test inherits them)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from reflexguard.ops import tracing
from tests.otel.receiver import Receiver

# What the exporters read (the standard variables): this receiver, a short batch delay.
ENVIRONMENT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_BSP_SCHEDULE_DELAY": "100",
               "OTEL_SERVICE_NAME": "reflexguard-test",
               "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
               # each flush exports what happened since the last one: one test's calls
               "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    from reflexguard.ops import otel_setup

    found = Receiver()
    found.start()
    saved = {name: os.environ.get(name) for name in ENVIRONMENT}
    os.environ.update({**ENVIRONMENT, "OTEL_EXPORTER_OTLP_ENDPOINT": found.endpoint})
    otel_setup.shutdown()  # providers made from now on export to this receiver
    yield found
    otel_setup.shutdown()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    found.stop()


@pytest.fixture
def otlp(receiver: Receiver) -> Iterator[Receiver]:
    receiver.clear()
    yield receiver
    tracing.reset()


async def flush() -> None:
    """Export what this process's providers hold (off the loop: the exporter blocks)."""
    from reflexguard.ops import otel_setup

    providers = otel_setup._providers
    assert providers is not None, "no OpenTelemetry providers were made"
    await asyncio.to_thread(providers.flush)
