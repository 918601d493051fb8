"""OpenTelemetry GenAI spans and metrics for guarded calls (docs/observability.md).

This is an I/O edge, imported only when `otel` is on (reflexguard.ops.tracing). Names
follow the GenAI semantic conventions (Development status): a CLIENT inference span
`chat {model}` per upstream attempt, one `apply_guardrail reflexguard` span per guard
decision with a `gen_ai.guardrail.result` event per invalid call, the metrics
`gen_ai.client.operation.duration` and `gen_ai.client.token.usage`. Contents (messages,
tool arguments, tool definitions) only with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Mapping
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import Meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from reflexguard.core.limits import clip
from reflexguard.ops.otel_attributes import (
    CONTENT_LIMIT,
    capture_content,
    dialect_of,
    latest_only,
    output_content,
    provider_of,
    request_content,
    response_attributes,
)
from reflexguard.ops.otel_loops import loop_attributes

SCOPE = "reflexguard"
COMPONENT = "reflexguard"
# The conventions' recommended buckets (gen-ai-metrics.md).
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                    20.48, 40.96, 81.92)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)
DURATION = ("gen_ai.client.operation.duration", "s", "GenAI operation duration")
TOKENS = ("gen_ai.client.token.usage", "{token}", "Number of input and output tokens used")
REASON_LIMIT = 200  # result.reason is to be low-cardinality: channels and tool names
TOKEN_KINDS = (("gen_ai.usage.input_tokens", "input"), ("gen_ai.usage.output_tokens", "output"))
KINDS = {"initial": "initial", "reask": "re-ask", "constrained": "constrained",
         "loop": "loop re-ask"}

# The request being served (set by the proxy's middleware, otel_proxy.py); None in the
# Python API, where each guarded request keeps its own.
current: contextvars.ContextVar[RequestTrace | None] = contextvars.ContextVar(
    "reflexguard_trace", default=None)


class Instruments:
    """The tracer and the two GenAI metrics, from one pair of providers.

    `tracer`: the SDK's (the Python API's application providers) or the proxy's direct
    one (ops/otel_spans.py); `histograms`: the proxy's locally aggregated pair
    (ops/otel_histograms.py), else the meter's own. Both kinds take the same calls."""

    def __init__(self, tracer: Tracer | Any, meter: Meter | None,
                 histograms: tuple[Any, Any] | None = None) -> None:
        self.tracer = tracer
        self.local = histograms is not None  # LocalHistogram's: add() as well as record()
        if histograms is not None:
            self.duration, self.tokens = histograms
        else:
            assert meter is not None, "a meter or the histograms"
            self.duration = meter.create_histogram(
                DURATION[0], unit=DURATION[1], description=DURATION[2],
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS))
            self.tokens = meter.create_histogram(
                TOKENS[0], unit=TOKENS[1], description=TOKENS[2],
                explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS))
        self.content = capture_content()
        self.legacy = not latest_only()


class RequestTrace:
    """One guarded request's spans: the parent, the open upstream span, the decision."""

    def __init__(self, tools: Instruments, parent: otel_context.Context | None,
                 server: Span | None = None) -> None:
        self.tools = tools
        self.parent = parent  # the SERVER span's context, or the caller's (Python API)
        self.server = server
        self.call: Any = None
        self.pending: Span | None = None  # the upstream span until its attempt is read
        self.pending_end: int | None = None
        self.pending_started = 0.0
        self.pending_error: str | None = None
        self.guard: Span | None = None
        self.margins: list[float] = []

    # -- upstream attempts ------------------------------------------------------------

    def base_attributes(self) -> dict[str, Any]:
        call = self.call
        provider = provider_of(call)
        chat = getattr(call, "chat", None)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
            "gen_ai.request.model": getattr(chat, "model", "") or "",
            "gen_ai.request.stream": bool(getattr(chat, "stream", False)),
        }
        if self.tools.legacy:
            attributes["gen_ai.system"] = provider
        session = getattr(call, "session", None)
        if session:
            attributes["gen_ai.conversation.id"] = session
        return attributes

    def start_upstream(self, server: Mapping[str, Any], body: bytes | None,
                       start_ns: int | None = None) -> Span:
        """The CLIENT span of one upstream request, under the open decision if any;
        `server`: its server.address and server.port."""
        self.close_pending()
        attributes = self.base_attributes()
        attributes.update(server)
        if self.tools.content and body:
            attributes.update(request_content(body))
        parent = (trace.set_span_in_context(self.guard, self.parent)
                  if self.guard is not None else self.parent)
        name = f"chat {attributes['gen_ai.request.model']}".rstrip()
        span = self.tools.tracer.start_span(name, context=parent, kind=SpanKind.CLIENT,
                                            attributes=attributes, start_time=start_ns)
        self.pending, self.pending_end, self.pending_error = span, None, None
        self.pending_started = time.perf_counter()
        return span

    def upstream_done(self, error: str | None = None) -> None:
        """The upstream answered (or failed): the span waits for its attempt's reading."""
        if self.pending is None:
            return
        self.pending_end = time.time_ns()
        if error is not None:
            self.pending_error = error
            self.close_pending()

    def close_pending(self, attributes: Mapping[str, Any] | None = None) -> None:
        span = self.pending
        if span is None:
            return
        self.pending = None
        if attributes:
            span.set_attributes(attributes)
        error = self.pending_error
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        end = self.pending_end or time.time_ns()
        started: int | None = getattr(span, "start_time", None)  # an SDK span's
        seconds = ((end - started) / 1e9 if started is not None
                   else time.perf_counter() - self.pending_started)
        self.record_metrics(span, seconds, error)
        span.end(end_time=end)

    def record_metrics(self, span: Span, seconds: float, error: str | None) -> None:
        attributes = getattr(span, "attributes", None) or {}
        labels = {k: attributes[k] for k in ("gen_ai.operation.name", "gen_ai.provider.name",
                                             "gen_ai.request.model", "gen_ai.response.model",
                                             "server.address", "server.port")
                  if k in attributes}
        if error is not None:
            labels["error.type"] = error
        tools = self.tools
        if tools.local:  # one key and one read of the current span for the three points
            key = frozenset(labels.items())
            context = trace.get_current_span().get_span_context()
            tools.duration.add(max(0.0, seconds), key, labels, None, context)
            for name, kind in TOKEN_KINDS:
                value = attributes.get(name)
                if isinstance(value, int):
                    tools.tokens.add(value, (key, kind), labels, ("gen_ai.token.type", kind),
                                     context)
            return
        tools.duration.record(max(0.0, seconds), labels)
        for name, kind in TOKEN_KINDS:
            if isinstance(attributes.get(name), int):
                tools.tokens.record(attributes[name], {**labels, "gen_ai.token.type": kind})

    # -- the guard's decision ---------------------------------------------------------

    def open_guard(self, policy: str) -> Span:
        if self.guard is None:
            attributes = {"gen_ai.operation.name": "apply_guardrail",
                          "gen_ai.provider.name": COMPONENT,
                          "gen_ai.guardrail.component.name": COMPONENT,
                          "gen_ai.guardrail.source": "model_response",
                          "gen_ai.guardrail.policy.id": policy}
            self.guard = self.tools.tracer.start_span(
                f"apply_guardrail {COMPONENT}", context=self.parent, kind=SpanKind.INTERNAL,
                attributes=attributes)
        return self.guard

    def calls_seen(self, call: Any, attempt: Any) -> None:
        """The attempt's invalid calls as events on the decision span (opened by the first)."""
        invalid = [v for verdict in attempt.verdicts for v in verdict.violations]
        margins = _margins(call, attempt)
        if attempt.number == 1:
            self.margins = [m for m in margins if m is not None]
        if not invalid:
            return
        span = self.open_guard(_policy(call))
        for position, violation in enumerate(invalid):
            attributes: dict[str, Any] = {
                "gen_ai.guardrail.component.name": COMPONENT,
                "gen_ai.guardrail.result.type": "channel",
                "gen_ai.guardrail.result.value": str(violation.channel),
                "gen_ai.tool.name": violation.name or "",
                "reflexguard.attempt": attempt.number,
                "reflexguard.attempt.kind": KINDS.get(attempt.kind, attempt.kind),
            }
            if position < len(margins) and margins[position] is not None:
                attributes["reflexguard.tool_name_margin"] = margins[position]
            if self.tools.content:
                attributes["reflexguard.violation.detail"] = clip(violation.detail,
                                                                  CONTENT_LIMIT)
            span.add_event("gen_ai.guardrail.result", attributes)

    def decide(self, call: Any, result: Any) -> None:
        span = self.open_guard(_policy(call))
        channels: dict[str, set[str]] = {}
        for attempt in result.attempts:
            for verdict in attempt.verdicts:
                for violation in verdict.violations:
                    channels.setdefault(str(violation.channel), set()).add(violation.name or "")
        reason = "; ".join(f"{channel}: {', '.join(sorted(n for n in names if n)) or '-'}"
                           for channel, names in sorted(channels.items()))
        attributes: dict[str, Any] = {
            "gen_ai.guardrail.result.type": "outcome",
            "gen_ai.guardrail.result.value": result.outcome,
            "gen_ai.guardrail.result.reason": clip(reason or result.outcome, REASON_LIMIT),
            "reflexguard.attempts": result.upstream_calls,
            "reflexguard.violations": result.violations,
        }
        if result.fallbacks:
            attributes["reflexguard.fallbacks"] = list(result.fallbacks)
        attributes.update(loop_attributes(span, result))  # repeated calls (ops/otel_loops.py)
        if self.margins:
            attributes["reflexguard.tool_name_margins"] = self.margins
            attributes["reflexguard.tool_name_margin.min"] = min(self.margins)
        span.set_attributes(attributes)
        span.end()
        self.guard = None
        self.annotate_server(call, result.outcome,
                             sum(a.upstream_seconds for a in result.attempts))

    def annotate_server(self, call: Any, outcome: str, upstream_seconds: float) -> None:
        target = self.server
        if target is None:
            return
        added = max(0.0, time.perf_counter() - call.started - upstream_seconds)
        target.set_attributes({"reflexguard.request_id": getattr(call, "request_id", ""),
                               "reflexguard.dialect": dialect_of(call),
                               "reflexguard.outcome": outcome,
                               "reflexguard.overhead_ms": round(added * 1000, 3)})

    def finish(self) -> None:
        """The request is over: whatever is still open ends now."""
        self.close_pending()
        if self.guard is not None:
            self.guard.end()
            self.guard = None


def _policy(call: Any) -> str:
    rules = getattr(call, "rules", None)
    toolset = getattr(rules, "toolset", None)
    return f"toolset:{getattr(toolset, 'digest', '')}"


def _margins(call: Any, attempt: Any) -> list[float | None]:
    margins = getattr(call, "margins", None)
    if margins is None or not getattr(margins, "enabled", False):
        return []
    return [m.name_margin for m in margins.of(attempt)]


class OtelHooks:
    """The hooks of reflexguard.ops.tracing, with OpenTelemetry on."""

    enabled = True

    def __init__(self, tools: Instruments) -> None:
        self.tools = tools

    def trace_of(self, call: Any) -> RequestTrace:
        serving = current.get()
        if serving is not None:
            if serving.call is None:
                serving.call = call
            return serving
        # The Python API: no server span; the caller's current span is the parent.
        state: RequestTrace | None = call.__dict__.get("_otel_trace")
        if state is None:
            state = RequestTrace(self.tools, otel_context.get_current())
            state.call = call
            call.__dict__["_otel_trace"] = state
        return state

    def begin(self, call: Any) -> None:
        self.trace_of(call)

    def attempt(self, call: Any, attempt: Any) -> None:
        state = self.trace_of(call)
        if attempt.kind != "fix":
            if state.pending is None:  # in-process: the caller's client did the I/O
                start = time.time_ns() - int(attempt.upstream_seconds * 1e9)
                state.start_upstream({}, None, start_ns=start)
                state.upstream_done()
            attributes = response_attributes(attempt.completion)
            attributes["reflexguard.attempt.kind"] = KINDS.get(attempt.kind, attempt.kind)
            attributes["reflexguard.attempt"] = attempt.number
            if self.tools.content:
                attributes.update(output_content(attempt.completion))
            state.close_pending(attributes)
        state.calls_seen(call, attempt)

    def clean(self, call: Any, body: bytes) -> None:
        state = self.trace_of(call)
        try:
            completion = orjson.loads(body)
        except orjson.JSONDecodeError:
            completion = {}
        attributes = response_attributes(completion) if isinstance(completion, dict) else {}
        attributes["reflexguard.attempt.kind"] = "initial"
        attributes["reflexguard.attempt"] = 1
        if self.tools.content and isinstance(completion, dict):
            attributes.update(output_content(completion))
        state.close_pending(attributes)
        span = state.open_guard(_policy(call))
        span.set_attributes({"gen_ai.guardrail.result.type": "outcome",
                             "gen_ai.guardrail.result.value": "clean",
                             "gen_ai.guardrail.result.reason": "clean",
                             "reflexguard.attempts": 1, "reflexguard.violations": 0})
        span.end()
        state.guard = None
        seconds = time.perf_counter() - state.pending_started
        state.annotate_server(call, "clean", seconds)

    def decided(self, call: Any, result: Any) -> None:
        state = self.trace_of(call)
        state.decide(call, result)
        if current.get() is None:
            state.finish()
            call.__dict__.pop("_otel_trace", None)


def library_hooks() -> OtelHooks:
    return OtelHooks(Instruments(trace.get_tracer(SCOPE), metrics.get_meter(SCOPE)))
