"""This process's OpenTelemetry providers for the proxy: OTLP/HTTP traces and metrics.

This is an I/O edge, imported only with `otel` on. The SDK and its exporters read the
standard variables themselves (OTEL_EXPORTER_OTLP_ENDPOINT, _TRACES_/_METRICS_ENDPOINT,
_HEADERS, _TIMEOUT, _COMPRESSION, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_BSP_*, OTEL_METRIC_EXPORT_INTERVAL, OTEL_TRACES_SAMPLER): nothing here overrides
them. Providers are made once per process and remade after a fork (the pid changes), so
each worker of `serve --workers N` exports from its own, and none is installed as the
global provider: an application that imports reflexguard keeps its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

DEFAULT_SERVICE = "reflexguard"


@dataclass
class Providers:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    pid: int

    def flush(self) -> None:
        """Export what is buffered (an app's cleanup; a worker's drain on SIGTERM)."""
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()


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
    tracer_provider = TracerProvider(resource=res)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    meter_provider = MeterProvider(
        resource=res, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
    _providers = Providers(tracer_provider, meter_provider, os.getpid())
    return _providers


def shutdown() -> None:
    """Flush and drop this process's providers (tests that change the endpoint)."""
    global _providers
    if _providers is not None:
        _providers.tracer_provider.shutdown()
        _providers.meter_provider.shutdown()
        _providers = None
