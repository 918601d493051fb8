"""This process's OpenTelemetry providers for the proxy: OTLP/HTTP traces and metrics.

This is an I/O edge, imported only with `otel` on. The SDK and its exporters read the
standard variables themselves (OTEL_EXPORTER_OTLP_ENDPOINT, _TRACES_/_METRICS_ENDPOINT,
_HEADERS, _TIMEOUT, _COMPRESSION, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_BSP_*, OTEL_METRIC_EXPORT_INTERVAL, OTEL_TRACES_SAMPLER): nothing here overrides
them. Providers are made once per process and remade after a fork (the pid changes), so
each worker of `serve --workers N` exports from its own, and none is installed as the
global provider: an application that imports reflexguard keeps its own.

The proxy's own providers take three short cuts (issue 34, docs/decisions.md): spans are
plain records until a sampled one ends (ops/otel_spans.py), the two GenAI histograms are
aggregated locally and added to the periodic reader's collections (ops/otel_histograms.py),
and the span exporter writes the protobuf bytes directly (ops/otel_export.py). Each keeps
to the SDK's output; where one cannot, it falls back to the SDK, counted and logged.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from reflexguard.ops.otel import (
    DURATION,
    DURATION_BUCKETS,
    SCOPE,
    TOKEN_BUCKETS,
    TOKENS,
)
from reflexguard.ops.otel_export import DirectSpanExporter
from reflexguard.ops.otel_histograms import LocalHistogram, LocalMetrics

DEFAULT_SERVICE = "reflexguard"
_log = logging.getLogger("reflexguard.otel")


class Fallbacks:
    """The OpenTelemetry edge's fallbacks: counted here, logged, and given to the app's
    telemetry (its fallbacks counter and events) once one is attached; those taken while
    the providers are made, before any app, are given to it then."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.sink: Callable[..., None] | None = None
        self.pending: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.counts[kind] += 1
        if self.sink is None:
            _log.warning("fallback %s %s", kind, fields)
            self.pending.append((kind, fields))
        else:
            self.sink(kind, **fields)

    def attach(self, sink: Callable[..., None]) -> None:
        self.sink = sink
        for kind, fields in self.pending:
            sink(kind, **fields)
        self.pending.clear()


@dataclass
class Providers:
    tracer_provider: TracerProvider
    metrics: LocalMetrics  # the two GenAI histograms and their own periodic export
    pid: int
    histograms: tuple[LocalHistogram, LocalHistogram]
    fallbacks: Fallbacks = field(default_factory=Fallbacks)

    def flush(self) -> None:
        """Export what is buffered (an app's cleanup; a worker's drain on SIGTERM)."""
        self.tracer_provider.force_flush()
        self.metrics.force_flush()


_providers: Providers | None = None


def resource() -> Resource:
    """OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES win; `reflexguard` otherwise."""
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")
    attributes: dict[str, str | int] = {"process.pid": os.getpid()}
    if not named:
        attributes["service.name"] = DEFAULT_SERVICE
    return Resource.create(attributes)


def process_providers() -> Providers:
    global _providers
    if _providers is not None and _providers.pid == os.getpid():
        return _providers
    res = resource()
    fallbacks = Fallbacks()
    tracer_provider = TracerProvider(resource=res)
    tracer_provider.add_span_processor(BatchSpanProcessor(DirectSpanExporter(fallbacks)))
    histograms = (LocalHistogram(*DURATION, DURATION_BUCKETS),
                  LocalHistogram(*TOKENS, TOKEN_BUCKETS))
    metrics = LocalMetrics(OTLPMetricExporter(), histograms, res, SCOPE)
    _providers = Providers(tracer_provider, metrics, os.getpid(), histograms, fallbacks)
    return _providers


def shutdown() -> None:
    """Flush and drop this process's providers (tests that change the endpoint)."""
    global _providers
    if _providers is not None:
        _providers.tracer_provider.shutdown()
        _providers.metrics.shutdown()
        _providers = None
