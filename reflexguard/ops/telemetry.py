"""Counting and logging: Prometheus metrics, structlog events, the JSONL event file.

This is an I/O edge. Events carry no headers and no keys: the Authorization header and
upstream credentials never reach a log line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import orjson
import structlog
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client import values as prometheus_values
from prometheus_client.multiprocess import MultiProcessCollector

from reflexguard.core.attempts import Attempt, AttemptKind, Outcome
from reflexguard.core.channels import Channel
from reflexguard.core.limits import clip, safe_label
from reflexguard.core.loops import LoopReport
from reflexguard.core.margins import CallMargin
from reflexguard.ops.events import (
    AttemptEvent,
    CallEvent,
    FallbackEvent,
    HistoryEvent,
    OutcomeEvent,
    RepeatedCallEvent,
)
from reflexguard.ops.state import SessionState, memory_state

DETAIL_LIMIT = 600  # a violation's detail quotes model output, which may be megabytes

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   10, 30, 60, 120, 300)
# Name margins in nats (docs/screen.md): dense below 1, where quantization flips decisions;
# a negative margin (a sampled runner-up) lands in the first bucket.
MARGIN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 8, 12, 20)
MODEL_LABELS = 64  # request-supplied model names must not grow the label set without bound


def dumps(record: Any, **_: Any) -> bytes:
    """orjson, or where it refuses (lone surrogates from a header, > 254 levels) the
    stdlib with ASCII escapes: a log line must never be the thing that fails."""
    try:
        return orjson.dumps(record, default=str)
    except (TypeError, RecursionError):
        return json.dumps(record, ensure_ascii=True, default=repr).encode()


def multiprocess_dir() -> str | None:
    """Where prometheus_client keeps this process's values when workers share them
    (`serve --workers N`, docs/scaling.md), else None. prometheus_client picks in-memory or
    file-backed values once, when it is first imported: the directory counts only if it
    did pick files, or this process's counts would silently be missing from the sum."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path and getattr(prometheus_values.ValueClass, "_multiprocess", False):
        return path
    return None


def append_line(fd: int, line: bytes) -> None:
    """One write(2) per line on an O_APPEND descriptor: the kernel then places the whole
    line at the end of the file, so lines from several processes never interleave. A
    buffered file object gives no such promise (it may split a line over several writes)."""
    written = os.write(fd, line)
    if written < len(line):  # a full disk or a signal mid-write: the rest may now be torn
        structlog.get_logger("reflexguard").warning(
            "events_line_split", written=written, length=len(line))
        while written < len(line):
            written += os.write(fd, line[written:])


def configure_logging(level: str) -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt=None, utc=True),  # epoch seconds: cheap
            structlog.processors.format_exc_info,  # the traceback itself, not `true`
            # orjson straight to bytes: structlog's documented fastest configuration.
            structlog.processors.JSONRenderer(serializer=dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.BytesLoggerFactory(sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )


class Telemetry:
    def __init__(self, events_path: Path | None = None) -> None:
        self.registry = CollectorRegistry()
        self.tool_calls = PromCounter(
            "reflexguard_tool_calls", "Tool calls by channel", ["channel", "model", "dialect"],
            registry=self.registry,
        )
        self.repairs = PromCounter(
            "reflexguard_repairs", "Repair ladders by outcome", ["outcome", "dialect"],
            registry=self.registry,
        )
        self.fallbacks = PromCounter(
            "reflexguard_fallbacks", "Fallbacks taken, by kind", ["kind"], registry=self.registry
        )
        self.fixes = PromCounter(
            "reflexguard_fixes", "Deterministic fixes applied", ["kind"], registry=self.registry
        )
        self.upstream_seconds = Histogram(
            "reflexguard_upstream_seconds", "Time waiting on the upstream per attempt",
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.added_seconds = Histogram(
            "reflexguard_added_seconds", "Time spent in reflexguard itself per request",
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.name_margin = Histogram(
            "reflexguard_tool_name_margin", "Logit margin of each tool call's name, in nats",
            ["model"], buckets=MARGIN_BUCKETS, registry=self.registry,
        )
        self.thin_margins = PromCounter(
            "reflexguard_thin_margin_calls", "Tool calls whose name margin is below "
            "margin_threshold", ["model"], registry=self.registry,
        )
        self.upstream_unreachable = PromCounter(
            "reflexguard_upstream_unreachable", "Upstream requests whose connection failed "
            "(refused, reset, closed early); logged at most every 10 s (http/health.py)",
            registry=self.registry,
        )
        self.connections_refused = PromCounter(
            "reflexguard_connections_refused", "Client connections refused or closed by a "
            "connection bound (cap, idle shed, header timeout, body timeout)", ["reason"],
            registry=self.registry,
        )
        self._refusal_logged: dict[str, float] = {}
        self.history = PromCounter(
            "reflexguard_history_repaired", "Historical tool calls repaired before "
            "forwarding (channel history_repaired), by kind", ["kind", "dialect"],
            registry=self.registry,
        )
        self.repeated_calls = PromCounter(
            "reflexguard_repeated_calls", "Calls of the repeated_call channel (a valid call "
            "repeating one already made with the same result), by what the loop guard did",
            ["action", "dialect"], registry=self.registry,
        )
        # Fault injection (testing only, core/inject.py): what was put on answers, and
        # what was drawn but could not be put on a call (why: in the fallback event).
        self.injected_faults = PromCounter(
            "reflexguard_injected_faults", "Faults injected into upstream answers "
            "(inject_faults, testing only), by channel", ["channel"], registry=self.registry)
        self.injected_skipped = PromCounter(
            "reflexguard_injected_faults_skipped", "Faults drawn for a call they could not "
            "be put on, by channel", ["channel"], registry=self.registry)
        # Replaced by the app's own (GuardContext) when it has settings: memory or Redis.
        self.sessions: SessionState = memory_state()
        self._models: set[str] = set()
        self._call_counters: dict[tuple[str, str, str], Any] = {}
        self.log = structlog.get_logger("reflexguard")
        self._exposed = self.registry
        shared = multiprocess_dir()
        if shared is not None:
            # Workers: every process's values, summed from their files, and only those:
            # exposing this registry too would count this process twice.
            self._exposed = CollectorRegistry()
            MultiProcessCollector(self._exposed, shared)  # type: ignore[no-untyped-call]
        self._events: int | None = None  # an O_APPEND descriptor, written by append_line
        if events_path is not None:
            events_path.parent.mkdir(parents=True, exist_ok=True)
            self._events = os.open(events_path,
                                   os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def close(self) -> None:
        if self._events is not None:
            os.close(self._events)
            self._events = None

    def metrics_text(self) -> bytes:
        return generate_latest(self._exposed)

    def _write(self, record: AttemptEvent | OutcomeEvent | FallbackEvent,
               logged: bool = True) -> None:
        """To the events file, if one is set, and (when `logged`) as a log line."""
        if logged:
            fields = {k: v for k, v in record.items() if k not in ("event", "ts")}
            self.log.info(record["event"], **fields)
        if self._events is not None:
            append_line(self._events, dumps(record) + b"\n")

    def _calls_counter(self, channel: str, model: str, dialect: str) -> Any:
        """`tool_calls.labels(...)`, its child kept: prometheus_client's lookup validates
        and joins the labels on every call (~10 us, docs/performance.md). Bounded as the
        labels are: channels, MODEL_LABELS models, dialects."""
        key = (channel, model, dialect)
        child = self._call_counters.get(key)
        if child is None:
            child = self._call_counters[key] = self.tool_calls.labels(channel, model, dialect)
        return child

    def attempt(self, attempt: Attempt, request_id: str, session: str | None, model: str,
                toolset_hash: str, stream: bool, dialect: str = "chat",
                margins: Sequence[CallMargin] = (), margin_threshold: float = 0.0) -> None:
        calls: list[CallEvent] = [
            {"channel": str(v.channel), "name": safe_label(v.name) if v.name else v.name,
             "detail": clip(v.detail, DETAIL_LIMIT)}
            for verdict in attempt.verdicts for v in verdict.calls
        ]
        for fault in attempt.injected:  # the first choice's calls lead `calls`
            if fault.index < len(calls):
                calls[fault.index]["injected"] = str(fault.channel)
                calls[fault.index]["injected_detail"] = clip(fault.detail, DETAIL_LIMIT)
        label = self._model_label(model)
        if margins and attempt.verdicts:
            first_choice = calls[:len(attempt.verdicts[0].calls)]
            self._margins(first_choice, margins, margin_threshold, label)
        if session and attempt.kind != "initial":
            self.sessions.tried(request_id)
        if attempt.kind != "fix":
            for call in calls:
                self._calls_counter(call["channel"], label, dialect).inc()
                if session and call["channel"] != Channel.OK:
                    self.sessions.saw(request_id, call["channel"])
            self.upstream_seconds.observe(attempt.upstream_seconds)
        for fix in attempt.fixes:
            self.fixes.labels(fix).inc()
        internal = [kind for verdict in attempt.verdicts for kind in verdict.internal_events]
        for kind in internal:  # a validator fault is ours: logged at WARNING (check_fault)
            record = self.warning_fallback if kind == "validator_error" else self.fallback
            record(kind, request_id=request_id, attempt=attempt.number)
        # A clean first attempt (every call ok, nothing fixed, no internal event, no thin
        # margin) is counted and goes to the events file, but gets no log line: the log
        # is for what went wrong, and rendering a line per request cost more than the
        # rest of the telemetry (docs/decisions.md, "Clean attempts are not logged").
        clean = (attempt.kind == "initial" and not attempt.fixes
                 and all(c["channel"] == Channel.OK and not c.get("thin_margin")
                         for c in calls)
                 and not internal)
        if clean and self._events is None:
            return
        self._write(_attempt_event(request_id, session, model, attempt.number, attempt.kind,
                                   calls, list(attempt.fixes), toolset_hash,
                                   attempt.upstream_seconds, stream, dialect),
                    logged=not clean)

    def clean_answer(self, names: Sequence[str], request_id: str, session: str | None,
                     model: str, toolset_hash: str, stream: bool, dialect: str,
                     upstream_seconds: float, environment_errors: int | None) -> None:
        """What `attempt` then `outcome` record for a first answer whose calls are all ok
        (validate.clean_tool_calls), without an Attempt to read them from."""
        child = self._calls_counter(str(Channel.OK), self._model_label(model), dialect)
        child.inc(len(names))
        self.upstream_seconds.observe(upstream_seconds)
        if self._events is not None:
            calls: list[CallEvent] = [
                {"channel": str(Channel.OK), "name": safe_label(name), "detail": ""}
                for name in names]
            self._write(_attempt_event(request_id, session, model, 1, "initial", calls, [],
                                       toolset_hash, upstream_seconds, stream, dialect),
                        logged=False)
        if session:
            self.sessions.finish(request_id, session, "clean", environment_errors)

    def _margins(self, calls: list[CallEvent], margins: Sequence[CallMargin], threshold: float,
                 label: str) -> None:
        """Margins onto the first choice's call events, which lead `calls` in call order;
        a reply without a call has its call margin on its one reply-level event, if any."""
        for margin in margins:
            position = 0 if margin.index < 0 else margin.index
            if position >= len(calls) or (margin.index < 0 and calls[0]["name"] is not None):
                continue
            call = calls[position]
            call["name_margin"] = margin.name_margin
            call["call_margin"] = margin.call_margin
            if margin.name_margin is None:
                continue
            self.name_margin.labels(label).observe(margin.name_margin)
            if margin.name_margin < threshold:
                call["thin_margin"] = True
                self.thin_margins.labels(label).inc()

    def _model_label(self, model: str) -> str:
        if model in self._models:
            return model
        if len(self._models) < MODEL_LABELS:
            self._models.add(model)
            return model
        return "other"

    def outcome(self, outcome: Outcome, fallbacks: list[str], request_id: str,
                session: str | None, dialect: str = "chat",
                environment_errors: int | None = None, chosen: str | None = None) -> None:
        """`chosen`: the attempt the agent got (choice.chosen_attempt), recorded."""
        if session:  # one session-state write per request, never waited on
            self.sessions.finish(request_id, session, outcome, environment_errors)
        if outcome not in ("clean", "observed"):
            self.repairs.labels(outcome, dialect).inc()
        if outcome != "clean":
            record: OutcomeEvent = {"event": "outcome", "ts": time.time(), "outcome": outcome,
                                    "request_id": request_id, "session": session,
                                    "dialect": dialect}
            if chosen is not None:
                record["chosen_attempt"] = chosen
            self._write(record)
        for kind in fallbacks:
            self.fallback(kind, request_id=request_id, session=session)

    def history_repaired(self, kinds: Mapping[str, int], dialect: str,
                         left_as_sent: int = 0) -> None:
        """A request's history repaired before forwarding: counted by kind, a WARNING (the
        agent's stored conversation carries what a server would refuse) and an event;
        broken calls past the repair bound, forwarded as sent, are a fallback."""
        for kind, count in kinds.items():
            self.history.labels(kind, dialect).inc(count)
        if left_as_sent:
            self.fallback("history_repair_bound", dialect=dialect, left_as_sent=left_as_sent)
        record: HistoryEvent = {"event": "history_repaired", "ts": time.time(),
                                "dialect": dialect, "kinds": dict(kinds)}
        self.log.warning("history_repaired", dialect=dialect, kinds=record["kinds"])
        if self._events is not None:
            append_line(self._events, dumps(record) + b"\n")

    def loop(self, report: LoopReport, request_id: str, session: str | None,
             dialect: str) -> None:
        """A reply that repeats (the loop guard's report): counted per repeated call, one
        event and one log line (its fallback, when the reply was kept after a re-ask was
        due, is among the outcome's)."""
        self.repeated_calls.labels(report.action, dialect).inc(len(report.repeats))
        record: RepeatedCallEvent = {
            "event": "repeated_call", "ts": time.time(), "request_id": request_id,
            "session": session, "dialect": dialect, "action": report.action,
            "reason": report.reason,
            "calls": [{"name": safe_label(repeat.name), "times": repeat.times}
                      for _, repeat in report.repeats]}
        self.log.info("repeated_call", request_id=request_id, session=session,
                      dialect=dialect, action=report.action, reason=report.reason,
                      calls=record["calls"])
        if self._events is not None:
            append_line(self._events, dumps(record) + b"\n")

    def client_gone(self, **fields: Any) -> None:
        """The agent disconnected: one info line, one count, and the work stops."""
        self.fallback("client_disconnected", **fields)
        if fields.get("session"):
            self.sessions.abandon(str(fields.get("request_id")), str(fields["session"]))

    def connection_refused(self, reason: str, **fields: Any) -> None:
        """A connection bound acted: always counted; a WARNING at most every 10 s per
        reason (a flood of slow connections must not become a flood of log lines)."""
        self.connections_refused.labels(reason).inc()
        now = time.monotonic()
        if now - self._refusal_logged.get(reason, -1e9) >= 10.0:
            self._refusal_logged[reason] = now
            self.log.warning("connection_refused", reason=reason, **fields)

    def fallback(self, kind: str, **fields: Any) -> None:
        """Every fallback is counted and logged: nothing falls back silently."""
        self.fallbacks.labels(kind).inc()
        # Fallbacks carry context of their own kind (a path, an attempt): beyond the
        # declared keys, the record is open.
        self._write(cast(FallbackEvent, {"event": "fallback", "ts": time.time(), "kind": kind,
                                         **fields}))

    def warning_fallback(self, kind: str, **fields: Any) -> None:
        """A fallback the user would want to know about (a call left unguarded): counted
        as every fallback is, written to the events file, and logged at WARNING."""
        self.fallbacks.labels(kind).inc()
        self.log.warning("fallback", kind=kind, **fields)
        self._write(cast(FallbackEvent, {"event": "fallback", "ts": time.time(), "kind": kind,
                                         **fields}), logged=False)


def _attempt_event(request_id: str, session: str | None, model: str, number: int,
                   kind: AttemptKind,
                   calls: list[CallEvent], fixes: list[str], toolset_hash: str,
                   upstream_seconds: float, stream: bool, dialect: str) -> AttemptEvent:
    """One attempt's events-file record, as both the ladder's path and the clean-answer
    shortcut write it."""
    return {
        "event": "attempt", "ts": time.time(), "request_id": request_id,
        "session": session, "model": model, "attempt": number, "kind": kind,
        "calls": calls, "fixes": fixes, "toolset": toolset_hash,
        "latency_ms": round(upstream_seconds * 1000, 3), "stream": stream, "dialect": dialect,
    }
