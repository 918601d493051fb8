"""Counting and logging: Prometheus metrics, structlog events, the JSONL event file.

This is an I/O edge. Events carry no headers and no keys: the Authorization header and
upstream credentials never reach a log line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter, OrderedDict
from pathlib import Path
from typing import IO, Any, cast

import orjson
import structlog
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as PromCounter

from reflexguard.core.channels import Channel
from reflexguard.core.ladder import Attempt, Outcome
from reflexguard.core.limits import clip, safe_label
from reflexguard.ops.events import AttemptEvent, CallEvent, FallbackEvent, OutcomeEvent

DETAIL_LIMIT = 600  # a violation's detail quotes model output, which may be megabytes

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   10, 30, 60, 120, 300)
SESSION_CAPACITY = 10_000
MODEL_LABELS = 64  # request-supplied model names must not grow the label set without bound


def dumps(record: Any, **_: Any) -> bytes:
    """orjson, or where it refuses (lone surrogates from a header, > 254 levels) the
    stdlib with ASCII escapes: a log line must never be the thing that fails."""
    try:
        return orjson.dumps(record, default=str)
    except (TypeError, RecursionError):
        return json.dumps(record, ensure_ascii=True, default=repr).encode()


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


class SessionCounts:
    """Violations per agent episode, bounded so that a long-lived proxy cannot grow forever."""

    def __init__(self, capacity: int = SESSION_CAPACITY) -> None:
        self._capacity = capacity
        self._sessions: OrderedDict[str, Counter[str]] = OrderedDict()

    def add(self, session: str, channel: str) -> None:
        counts = self._sessions.get(session)
        if counts is None:
            counts = self._sessions[session] = Counter()
            if len(self._sessions) > self._capacity:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session)
        counts[channel] += 1

    def get(self, session: str) -> dict[str, int] | None:
        counts = self._sessions.get(session)
        return dict(counts) if counts is not None else None


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
        self.sessions = SessionCounts()
        self._models: set[str] = set()
        self.log = structlog.get_logger("reflexguard")
        self._events: IO[bytes] | None = None
        if events_path is not None:
            events_path.parent.mkdir(parents=True, exist_ok=True)
            self._events = events_path.open("ab")

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None

    def metrics_text(self) -> bytes:
        return generate_latest(self.registry)

    def _write(self, record: AttemptEvent | OutcomeEvent | FallbackEvent) -> None:
        fields = {k: v for k, v in record.items() if k not in ("event", "ts")}
        self.log.info(record["event"], **fields)
        if self._events is not None:
            self._events.write(dumps(record) + b"\n")
            self._events.flush()

    def attempt(self, attempt: Attempt, request_id: str, session: str | None, model: str,
                toolset_hash: str, stream: bool, dialect: str = "chat") -> None:
        calls: list[CallEvent] = [
            {"channel": str(v.channel), "name": safe_label(v.name) if v.name else v.name,
             "detail": clip(v.detail, DETAIL_LIMIT)}
            for verdict in attempt.verdicts for v in verdict.calls
        ]
        if attempt.kind != "fix":
            label = self._model_label(model)
            for call in calls:
                self.tool_calls.labels(call["channel"], label, dialect).inc()
                if session and call["channel"] != Channel.OK:
                    self.sessions.add(session, call["channel"])
            self.upstream_seconds.observe(attempt.upstream_seconds)
        for fix in attempt.fixes:
            self.fixes.labels(fix).inc()
        for verdict in attempt.verdicts:
            for kind in verdict.internal_events:
                self.fallback(kind, request_id=request_id, attempt=attempt.number)
        self._write({
            "event": "attempt", "ts": time.time(), "request_id": request_id,
            "session": session, "model": model, "attempt": attempt.number,
            "kind": attempt.kind, "calls": calls, "fixes": list(attempt.fixes),
            "toolset": toolset_hash, "latency_ms": round(attempt.upstream_seconds * 1000, 3),
            "stream": stream, "dialect": dialect,
        })

    def _model_label(self, model: str) -> str:
        if model in self._models:
            return model
        if len(self._models) < MODEL_LABELS:
            self._models.add(model)
            return model
        return "other"

    def outcome(self, outcome: Outcome, fallbacks: list[str], request_id: str,
                session: str | None, dialect: str = "chat") -> None:
        if outcome not in ("clean", "observed"):
            self.repairs.labels(outcome, dialect).inc()
        if outcome != "clean":
            self._write({"event": "outcome", "ts": time.time(), "outcome": outcome,
                         "request_id": request_id, "session": session, "dialect": dialect})
        for kind in fallbacks:
            self.fallback(kind, request_id=request_id, session=session)

    def client_gone(self, **fields: Any) -> None:
        """The agent disconnected: one info line, one count, and the work stops."""
        self.fallback("client_disconnected", **fields)

    def fallback(self, kind: str, **fields: Any) -> None:
        """Every fallback is counted and logged: nothing falls back silently."""
        self.fallbacks.labels(kind).inc()
        # Fallbacks carry context of their own kind (a path, an attempt): beyond the
        # declared keys, the record is open.
        self._write(cast(FallbackEvent, {"event": "fallback", "ts": time.time(), "kind": kind,
                                         **fields}))
