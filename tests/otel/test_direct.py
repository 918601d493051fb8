"""The proxy's cheaper OpenTelemetry paths (issue 34) held to the SDK's own output: the
direct encoder writes what `encode_spans` writes, the local histograms export what the
SDK's explicit-bucket aggregation exports, and the direct tracer samples, propagates and
limits as `Tracer.start_span` does. No timings here: bench.overhead --otel on measures."""

from __future__ import annotations

import random
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBasedTraceIdRatio
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from reflexguard.ops.otel import DURATION_BUCKETS
from reflexguard.ops.otel_encode import Encoder, Unencodable
from reflexguard.ops.otel_histograms import LocalHistogram
from reflexguard.ops.otel_spans import DirectTracer

ATTRIBUTES: dict[str, Any] = {
    "gen_ai.operation.name": "chat", "server.port": 8000, "negative": -5, "zero": 0,
    "ratio": 1.5, "yes": True, "no": False, "empty": "", "é": "ünïcode",
    "gen_ai.response.finish_reasons": ["tool_calls", "stop"], "margins": [0.25, 1.0]}


def context(remote: bool = False, state: TraceState | None = None) -> SpanContext:
    return SpanContext(random.getrandbits(128), random.getrandbits(64), remote,
                       TraceFlags(3), trace_state=state)


def test_the_direct_encoder_writes_the_sdks_bytes() -> None:
    resource = Resource.create({"service.name": "rg", "process.pid": 7})
    scope = InstrumentationScope("reflexguard")
    spans = [
        ReadableSpan("POST /v1/chat/completions", context(), context(remote=True), resource,
                     ATTRIBUTES, (), (), SpanKind.SERVER, start_time=1, end_time=2,
                     instrumentation_scope=scope),
        ReadableSpan("chat m", context(state=TraceState([("k", "v")])), context(), resource,
                     {}, [Event("gen_ai.guardrail.result", {"reflexguard.attempt": 1}, 5)],
                     (), SpanKind.CLIENT, status=Status(StatusCode.ERROR, "500"),
                     start_time=10**18, end_time=10**18 + 5, instrumentation_scope=scope),
        ReadableSpan("apply_guardrail reflexguard", context(), None, resource, ATTRIBUTES,
                     (), (), SpanKind.INTERNAL, status=Status(StatusCode.ERROR),
                     start_time=3, end_time=4, instrumentation_scope=scope),
        ReadableSpan("other", context(), context(), Resource.create({"o": 1}), {}, (), (),
                     start_time=3, end_time=4, instrumentation_scope=None),
    ]
    encoder = Encoder()
    expected = encode_spans(spans).SerializePartialToString()
    assert encoder.request(spans) == expected
    assert encoder.request(spans) == expected  # again, from its caches


def test_the_direct_encoder_refuses_what_it_does_not_write() -> None:
    with_link = ReadableSpan("s", context(), None, Resource.create({}), {}, (),
                             [Link(context())], start_time=1, end_time=2)
    with pytest.raises(Unencodable):
        Encoder().request([with_link])


@pytest.mark.parametrize("temporality", [AggregationTemporality.DELTA,
                                         AggregationTemporality.CUMULATIVE])
def test_local_histograms_export_what_the_sdk_aggregates(temporality, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", "always_off")
    from opentelemetry.sdk.metrics import Histogram

    reader = InMemoryMetricReader(preferred_temporality={Histogram: temporality})
    sdk = MeterProvider(metric_readers=[reader]).get_meter("t").create_histogram(
        "d", explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
    local = LocalHistogram("d", "", "", DURATION_BUCKETS)
    delta = temporality is AggregationTemporality.DELTA
    for values in ([0.005, 0.01, 0.3, 100.0], [0.02], []):
        for value in values:
            for labels in ({"a": "x", "n": 1}, {"n": 1, "a": "x"}, {"a": "y"}):
                sdk.record(value, labels)
                local.record(value, labels)
        data = reader.get_metrics_data()
        want = sorted(((tuple(sorted(p.attributes.items())), p.count, p.sum, p.min, p.max,
                        tuple(p.bucket_counts))
                       for p in data.resource_metrics[0].scope_metrics[0].metrics[0]
                       .data.data_points) if data else [])
        ours = local.collect(delta)
        got = sorted((tuple(sorted(p.attributes.items())), p.count, p.sum, p.min, p.max,
                      tuple(p.bucket_counts)) for p in ours.data.data_points) if ours else []
        assert got == want


def test_local_histograms_bound_the_attribute_sets_as_the_sdk_does(monkeypatch) -> None:
    """A hostile upstream can name a new model on every answer: the points stay within the
    SDK's cardinality limit, the rest in its overflow set, the same as the SDK's."""
    monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", "always_off")
    from opentelemetry.sdk.metrics import Histogram

    reader = InMemoryMetricReader(
        preferred_temporality={Histogram: AggregationTemporality.CUMULATIVE})
    sdk = MeterProvider(metric_readers=[reader]).get_meter("t").create_histogram(
        "d", explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
    local = LocalHistogram("d", "", "", DURATION_BUCKETS)
    for n in range(5000):
        sdk.record(0.1, {"gen_ai.response.model": f"m{n}"})
        local.record(0.1, {"gen_ai.response.model": f"m{n}"})
    want = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics[0]
    ours = local.collect(delta=False)
    assert ours is not None

    def shape(points: Any) -> tuple[int, int, list[int]]:
        overflow = [p.count for p in points if p.attributes.get("otel.metric.overflow")]
        return len(points), sum(p.count for p in points), overflow

    assert shape(ours.data.data_points) == shape(want.data.data_points)
    assert len(ours.data.data_points) <= 2000 + 1  # the limit, and the overflow set


def test_local_histograms_keep_the_last_sampled_value_per_bucket_as_an_exemplar() -> None:
    local = LocalHistogram("d", "s", "", DURATION_BUCKETS)
    sampled = context()
    with trace.use_span(trace.NonRecordingSpan(sampled)):
        local.record(0.05, {"a": "x"})
        local.record(0.06, {"a": "x"})
    local.record(0.07, {"a": "x"})  # no span: no exemplar (trace_based)
    [point] = local.collect(delta=True).data.data_points
    [exemplar] = point.exemplars
    assert (exemplar.value, exemplar.trace_id, exemplar.span_id) == (
        0.06, sampled.trace_id, sampled.span_id)


def provider(sampler: Any = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    made = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    exported = InMemorySpanExporter()
    made.add_span_processor(SimpleSpanProcessor(exported))
    return made, exported


def request(tracer: DirectTracer, parent: Any = None) -> list[Any]:
    server = tracer.start_span("POST /v1/chat/completions", context=parent,
                               kind=SpanKind.SERVER, attributes={"http.route": "/v1"})
    inside = trace.set_span_in_context(server, parent)
    guard = tracer.start_span("apply_guardrail reflexguard", context=inside)
    client = tracer.start_span("chat m", context=trace.set_span_in_context(guard, inside),
                               kind=SpanKind.CLIENT, attributes={"a": 1})
    for span in (client, guard, server):
        span.end()
    return [server, guard, client]


def test_the_direct_tracer_exports_sdk_spans_with_parents_and_attributes() -> None:
    made, exported = provider()
    server, guard, _ = request(DirectTracer(made, "reflexguard"))
    spans = {s.name: s for s in exported.get_finished_spans()}
    assert spans["chat m"].parent.span_id == guard.context.span_id
    assert spans["apply_guardrail reflexguard"].parent.span_id == server.context.span_id
    assert spans["chat m"].attributes == {"a": 1}
    assert spans["chat m"].kind is SpanKind.CLIENT
    assert spans["chat m"].instrumentation_scope.name == "reflexguard"
    assert spans["chat m"].resource is made.resource
    assert len({s.context.trace_id for s in spans.values()}) == 1


def test_an_unsampled_trace_exports_nothing_and_still_carries_its_ids() -> None:
    made, exported = provider(ParentBasedTraceIdRatio(0.5))
    tracer = DirectTracer(made, "reflexguard")
    kept = dropped = 0
    for _ in range(200):
        server, guard, client = request(tracer)
        decisions = {s.context.trace_flags.sampled for s in (server, guard, client)}
        assert len(decisions) == 1  # the children take the trace's decision
        assert client.context.is_valid and client.attributes == {"a": 1}
        kept, dropped = (kept + 1, dropped) if server.sampled else (kept, dropped + 1)
    assert kept and dropped
    assert len(exported.get_finished_spans()) == 3 * kept


def test_a_remote_sampled_parent_is_followed_and_always_off_is_not_overruled() -> None:
    remote = trace.set_span_in_context(trace.NonRecordingSpan(SpanContext(
        5, 6, True, TraceFlags(TraceFlags.SAMPLED))))
    made, exported = provider(ParentBasedTraceIdRatio(0.0))
    server, _, _ = request(DirectTracer(made, "reflexguard"), remote)
    assert server.context.trace_id == 5 and server.parent.span_id == 6
    assert len(exported.get_finished_spans()) == 3
    made, exported = provider(ALWAYS_OFF)
    request(DirectTracer(made, "reflexguard"), remote)
    assert exported.get_finished_spans() == ()


def test_the_sdks_attribute_limits_still_cut(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "2")
    made, exported = provider()
    span = DirectTracer(made, "reflexguard").start_span(
        "s", attributes={"c": "y", "a": "x", "b": "abcdefgh"})
    span.end()
    [done] = exported.get_finished_spans()
    assert dict(done.attributes) == {"a": "x", "b": "abcd"}  # the SDK keeps the newest
    assert done.dropped_attributes == 1


def test_a_key_of_ever_new_values_is_written_the_same_uncached() -> None:
    resource = Resource.create({"service.name": "rg"})
    spans = [ReadableSpan("POST /v1", context(), None, resource,
                          {"reflexguard.request_id": f"rg-{n}", "reflexguard.overhead_ms": n / 7},
                          start_time=1, end_time=2) for n in range(600)]
    encoder = Encoder()
    assert encoder.request(spans) == encode_spans(spans).SerializePartialToString()
    assert "reflexguard.request_id" in encoder.varied
