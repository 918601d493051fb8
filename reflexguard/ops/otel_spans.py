"""The proxy's spans as plain records, handed to the span processor when they end (issue 34).

This is an I/O edge, imported only with `otel` on (reflexguard.ops.otel_proxy). The SDK's
own span (`Tracer.start_span`) validates each attribute as it is set (BoundedAttributes),
takes a lock per call, asks the sampler for every span and copies itself into a
ReadableSpan when it ends: about 30 us a span on the bench machine, three spans a
request. The proxy's spans carry only attributes reflexguard produced (str, int, float,
bool and lists of them: ops/otel.py), so here a span is a dict and a few fields; a sampled
one becomes the SDK's own ReadableSpan once, at end(), and goes to the provider's span
processor (the batch processor, then the exporter), exactly as an SDK span would. An
unsampled span is never built: it keeps its ids (its traceparent still goes upstream, as
the SDK's non-recording span's does) and its attributes (the metrics read them).

The SDK's rules that still apply, and how:
- Sampling: a span whose parent is remote, or absent, asks the provider's sampler as
  `start_span` does (attributes, trace state and all). A child of one of our spans takes
  its parent's decision when the sampler is one of the SDK's own (the ones the
  OTEL_TRACES_SAMPLER names build), which is what they would decide: ParentBased follows a
  local parent, the static ones never change, a ratio on the same trace id answers the
  same. Any other sampler is asked for every span.
- Limits (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, ...): a span
  over a count limit, or every span when a length limit is set, goes through the SDK's
  BoundedAttributes at end(), so the exported span is cut as the SDK would cut it.
- Span processors' on_start is not called: the proxy's provider has the one batch
  processor (otel_setup.py), whose on_start does nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.sampling import (
    DEFAULT_OFF,
    DEFAULT_ON,
    Decision,
    ParentBasedTraceIdRatio,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util import types

KEPT_FLAGS = TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID  # what a child inherits
FLAGS = tuple(TraceFlags(value) for value in range(256))  # made once, not per span
UNSET = Status(StatusCode.UNSET)  # immutable: shared by every span until one is set


def inherits(sampler: Any) -> bool:
    """Whether a child of a local span decides as its parent did under `sampler` (the SDK's
    own samplers, whose local-parent delegates are the defaults)."""
    return (sampler is DEFAULT_ON or sampler is DEFAULT_OFF
            or type(sampler) in (ParentBasedTraceIdRatio, StaticSampler, TraceIdRatioBased))


class DirectTracer:
    """`start_span` as ops/otel.py calls it, with the provider's sampler, id generator,
    resource and span processor."""

    def __init__(self, provider: TracerProvider, scope: str) -> None:
        sdk = provider.get_tracer(scope)
        if not isinstance(sdk, SdkTracer):  # OTEL_SDK_DISABLED: the SDK's no-op tracer
            raise TypeError(f"the provider's tracer is a {type(sdk).__name__}")
        self.sampler = sdk.sampler
        self.ids = sdk.id_generator
        self.resource = sdk.resource
        self.processor = sdk.span_processor
        self.scope = InstrumentationScope(scope)  # what get_tracer(scope) gives its spans
        self.inherit = inherits(self.sampler)
        self.random_ids = self.ids.is_trace_id_random()
        limits = SpanLimits()  # the SDK's reading of the OTEL_*_LIMIT variables
        self.limits = limits
        # None: no limit of that kind
        self.max_attributes = limits.max_span_attributes or sys.maxsize
        self.max_events = limits.max_events or sys.maxsize
        self.always_bound = (limits.max_span_attribute_length is not None
                             or limits.max_attribute_length is not None)

    def start_span(self, name: str, context: otel_context.Context | None = None,
                   kind: SpanKind = SpanKind.INTERNAL,
                   attributes: Mapping[str, Any] | None = None,
                   start_time: int | None = None) -> DirectSpan:
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is not None and not parent.is_valid:
            parent = None
        kept = dict(attributes) if attributes else {}
        state: TraceState | None
        if parent is not None and not parent.is_remote and self.inherit:
            flags, state = parent.trace_flags & KEPT_FLAGS, parent.trace_state
            trace_id = parent.trace_id
        else:  # what Tracer.start_span does
            trace_id = parent.trace_id if parent is not None else self.ids.generate_trace_id()
            result = self.sampler.should_sample(context, trace_id, name, kind, attributes, ())
            decision = result.decision
            # Decision.is_sampled / is_recording, read without their untyped methods
            flags = TraceFlags.SAMPLED if decision is Decision.RECORD_AND_SAMPLE \
                else TraceFlags.DEFAULT
            random = parent.trace_flags.random_trace_id if parent is not None else self.random_ids
            if random:
                flags |= TraceFlags.RANDOM_TRACE_ID
            state = result.trace_state
            if decision is not Decision.DROP:
                kept = dict(result.attributes)  # the sampler's own, as the SDK keeps them
        own = SpanContext(trace_id, self.ids.generate_span_id(), is_remote=False,
                          trace_flags=FLAGS[flags], trace_state=state)
        return DirectSpan(self, name, own, parent, kind, kept,
                          start_time if start_time is not None else time.time_ns())

    def emit(self, span: DirectSpan) -> None:
        """A sampled span that ended, as the SDK's ReadableSpan, to the processor."""
        attributes: Mapping[str, Any] = span.attributes
        limits = self.limits
        if self.always_bound or len(attributes) > self.max_attributes:
            attributes = BoundedAttributes(limits.max_span_attributes, attributes,
                                           max_value_len=limits.max_span_attribute_length)
        events: Sequence[Event] = span.events
        if events and (self.always_bound or len(events) > self.max_events):
            events = BoundedList.from_seq(limits.max_events, [Event(
                e.name, BoundedAttributes(limits.max_event_attributes, e.attributes,
                                          max_value_len=limits.max_attribute_length),
                e.timestamp) for e in events])
        self.processor.on_end(ReadableSpan(
            name=span.name, context=span.context, parent=span.parent, resource=self.resource,
            attributes=attributes, events=events, kind=span.kind, status=span.status,
            start_time=span.start_time, end_time=span.end_time,
            instrumentation_scope=self.scope))


class DirectSpan(trace.Span):
    """One span of the proxy's: what ops/otel.py sets on it, kept until end()."""

    def __init__(self, tracer: DirectTracer, name: str, context: SpanContext,
                 parent: SpanContext | None, kind: SpanKind, attributes: dict[str, Any],
                 start_time: int) -> None:
        self.tracer = tracer
        self.name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self.attributes = attributes
        self.events: list[Event] = []
        self.status = UNSET
        self.start_time = start_time
        self.end_time: int | None = None
        self.sampled = context.trace_flags.sampled

    def get_span_context(self) -> SpanContext:
        return self.context

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        if self.end_time is None:
            self.attributes.update(attributes)

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        if self.end_time is None:
            self.attributes[key] = value

    def add_event(self, name: str, attributes: types.Attributes = None,
                  timestamp: int | None = None) -> None:
        if self.end_time is None and self.sampled:  # an unsampled span's are never read
            self.events.append(Event(name, dict(attributes) if attributes else {},
                                     timestamp if timestamp is not None else time.time_ns()))

    def update_name(self, name: str) -> None:
        self.name = name

    def is_recording(self) -> bool:
        return self.end_time is None and self.sampled

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # The SDK's rule: an OK status is final, and UNSET never replaces one.
        if self.status.status_code is StatusCode.OK:
            return
        made = status if isinstance(status, Status) else Status(status, description)
        if made.status_code is not StatusCode.UNSET:
            self.status = made

    def record_exception(self, exception: BaseException, attributes: types.Attributes = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        # Not called by ops/otel*.py: failures are `error.type` and the status.
        self.add_event("exception", {"exception.type": type(exception).__name__,
                                     "exception.message": str(exception),
                                     **(dict(attributes) if attributes else {})}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time if end_time is not None else time.time_ns()
        if self.sampled:
            self.tracer.emit(self)
