"""The proxy's two GenAI histograms, aggregated here and exported on the reader's interval
(issue 34).

This is an I/O edge, imported only with `otel` on (reflexguard.ops.otel_setup). The SDK's
`Histogram.record` cleans the attributes into a new Measurement, sorts and hashes them,
asks the exemplar filter and offers a reservoir, each under locks: about 18 us a
measurement on the bench machine, three measurements a request, whether or not the trace
is sampled. Here a measurement is a frozenset lookup, a bisect and four additions. What
the reader exports is what the SDK's explicit-bucket aggregation would have exported for
the same measurements: the same points (one per attribute set, the SDK's cardinality
limit of 2000 with its overflow set), bounds, count, sum, min and max, the reader's
temporality (OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE), and the SDK's default
exemplars (the last measurement per bucket under a sampled span; OTEL_METRICS_EXEMPLAR_FILTER
always_on / always_off / trace_based is read as the SDK reads it).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, TraceFlags

CARDINALITY_LIMIT = 2000  # the SDK's default per metric stream
OVERFLOW: dict[str, Any] = {"otel.metric.overflow": True}
OVERFLOW_KEY = frozenset(OVERFLOW.items())
SAMPLED = TraceFlags.SAMPLED
_log = logging.getLogger("reflexguard.otel")


def exemplar_filter() -> str:
    """OTEL_METRICS_EXEMPLAR_FILTER as the SDK reads it; trace_based by default."""
    value = os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER", "trace_based").strip().lower()
    return value if value in ("always_on", "always_off") else "trace_based"


class Point:
    """One attribute set's aggregation since the last collection (delta) or ever."""

    __slots__ = ("attributes", "counts", "exemplars", "max", "min", "start", "sum")

    def __init__(self, attributes: dict[str, Any], buckets: int, start: int) -> None:
        self.attributes = attributes
        self.counts = [0] * buckets
        self.sum: float = 0
        self.min = math.inf
        self.max = -math.inf
        self.start = start
        # Per bucket, the last sampled measurement: (value, time, span context), made
        # into the SDK's Exemplar only when collected.
        self.exemplars: list[tuple[float, int, SpanContext] | None] = [None] * buckets


class LocalHistogram:
    """`record(amount, attributes)` as the SDK's histogram takes it, aggregated in place."""

    def __init__(self, name: str, unit: str, description: str,
                 boundaries: Sequence[float]) -> None:
        self.name, self.unit, self.description = name, unit, description
        self.bounds = tuple(float(b) for b in boundaries)
        self.points: dict[Hashable, Point] = {}
        self.cumulative: dict[Hashable, Point] = {}
        # The attribute sets counted against the limit: since the start (cumulative) or
        # this interval (delta, cleared by collect), as the SDK's streams are.
        self.admitted: set[Hashable] = set()
        self.lock = threading.Lock()  # the reader's thread collects while requests record
        self.filter = exemplar_filter()
        self.last_collection = time.time_ns()

    def record(self, amount: float, attributes: Mapping[str, Any]) -> None:
        self.add(amount, frozenset(attributes.items()), attributes)

    def add(self, amount: float, key: Hashable, labels: Mapping[str, Any],
            extra: tuple[str, Any] | None = None, context: SpanContext | None = None) -> None:
        """record() for a caller that measures several points with one label set: `key`
        names the attribute set (labels, plus `extra` when given), whose attributes are
        made only for a new point; `context`: the current span's, read once."""
        if not (amount >= 0 and math.isfinite(amount)):  # the SDK drops these too
            return
        index = bisect_left(self.bounds, amount)
        exemplar = None
        if self.filter != "always_off":  # the SDK's filter reads the current span
            if context is None:
                context = trace.get_current_span().get_span_context()
            if context.trace_flags & SAMPLED or self.filter == "always_on":
                exemplar = (amount, time.time_ns(), context)
        with self.lock:
            point = self.points.get(key)
            if point is None:
                attributes = dict(labels)
                if extra is not None:
                    attributes[extra[0]] = extra[1]
                if key not in self.admitted:
                    # The SDK's rule (1.45, the pinned one): CARDINALITY_LIMIT sets, then
                    # the overflow set as one point more.
                    if len(self.admitted) >= CARDINALITY_LIMIT:
                        key, attributes = OVERFLOW_KEY, dict(OVERFLOW)
                        point = self.points.get(key)
                    else:
                        self.admitted.add(key)
                if point is None:
                    point = self.points[key] = Point(attributes, len(self.bounds) + 1,
                                                     self.last_collection)
            point.counts[index] += 1
            point.sum += amount
            if amount < point.min:
                point.min = amount
            if amount > point.max:
                point.max = amount
            if exemplar is not None:
                point.exemplars[index] = exemplar

    def collect(self, delta: bool) -> Metric | None:
        """The points since the last collection (delta) or since the start (cumulative)."""
        now = time.time_ns()
        with self.lock:
            fresh, self.points = self.points, {}
            previous, self.last_collection = self.last_collection, now
            if delta:
                self.admitted.clear()
        if delta:
            points = [self.data_point(p, p.start or previous, now) for p in fresh.values()]
        else:
            for key, point in fresh.items():
                total = self.cumulative.get(key)
                if total is None:
                    self.cumulative[key] = point
                    continue
                total.counts = [a + b for a, b in zip(total.counts, point.counts, strict=True)]
                total.sum += point.sum
                total.min, total.max = min(total.min, point.min), max(total.max, point.max)
                total.exemplars = point.exemplars
            points = [self.data_point(p, p.start, now) for p in self.cumulative.values()]
            for point in self.cumulative.values():  # exemplars are per collection
                point.exemplars = [None] * len(point.counts)
        if not points:
            return None
        return Metric(name=self.name, description=self.description, unit=self.unit,
                      data=Histogram(data_points=points, aggregation_temporality=(
                          AggregationTemporality.DELTA if delta
                          else AggregationTemporality.CUMULATIVE)))

    def data_point(self, point: Point, start: int, now: int) -> HistogramDataPoint:
        return HistogramDataPoint(
            attributes=point.attributes, start_time_unix_nano=start, time_unix_nano=now,
            count=sum(point.counts), sum=point.sum, bucket_counts=tuple(point.counts),
            explicit_bounds=self.bounds, min=point.min, max=point.max,
            exemplars=[exemplar(*e) for e in point.exemplars if e is not None])


def exemplar(value: float, at: int, context: SpanContext) -> Exemplar:
    valid = context.is_valid  # always_on: a measurement outside a trace has no ids
    return Exemplar({}, value, at, context.span_id if valid else None,
                    context.trace_id if valid else None)


def delta_preferred() -> bool:
    """OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE as the OTLP exporter reads it for
    histograms: delta under DELTA and LOWMEMORY, cumulative otherwise (the default)."""
    value = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "")
    return value.strip().upper() in ("DELTA", "LOWMEMORY")


def _milliseconds(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class LocalMetrics:
    """The local histograms exported on their own interval, as the SDK's periodic reader
    does (OTEL_METRIC_EXPORT_INTERVAL, default 60 s; OTEL_METRIC_EXPORT_TIMEOUT, 30 s):
    a daemon thread, one export at a time, a last export on shutdown. The SDK's reader is
    not used for this: its collect() is final and exports only what its MeterProvider
    aggregated, and these histograms are the proxy's only metrics."""

    def __init__(self, exporter: MetricExporter, histograms: Sequence[LocalHistogram],
                 resource: Resource, scope: str) -> None:
        self.exporter = exporter
        self.histograms = histograms
        self.resource = resource
        self.scope = InstrumentationScope(scope)
        self.delta = delta_preferred()
        self.interval = _milliseconds("OTEL_METRIC_EXPORT_INTERVAL", 60_000) / 1000
        self.timeout = _milliseconds("OTEL_METRIC_EXPORT_TIMEOUT", 30_000)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True,
                                       name="reflexguard-otel-metrics")
        self.thread.start()

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            self.export()

    def export(self) -> bool:
        metrics = [m for h in self.histograms if (m := h.collect(self.delta)) is not None]
        if not metrics:
            return True
        data = MetricsData([ResourceMetrics(self.resource, [ScopeMetrics(
            self.scope, metrics, "")], self.resource.schema_url)])
        with self.lock:
            try:
                result = self.exporter.export(data, timeout_millis=self.timeout)
            except Exception:  # what the SDK's reader does: log, and export next time
                _log.exception("Exception while exporting metrics")
                return False
        return result is MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.export()

    def shutdown(self) -> None:
        self.stopping.set()
        self.thread.join(self.timeout / 1000)
        self.export()
        self.exporter.shutdown()
