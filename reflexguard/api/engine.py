"""One guarded request, whatever the client: first answer, ladder, what the caller gets.

An edge only through the injected `send` and the telemetry: the decisions are the core's
(`run_ladder`, `agent_completion`) and the stream's shape is the dialect's, exactly as
the HTTP proxy drives them (`reflexguard.http.call`, `reflexguard.http.streams`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

from reflexguard.api.errors import RepairExhausted, UpstreamStreamCut
from reflexguard.core.attempts import Attempt, LadderResult, read_attempt
from reflexguard.core.budget import policy_for_budget
from reflexguard.core.choice import agent_completion, returned_attempt, settle_choice
from reflexguard.core.errors import BadRequest
from reflexguard.core.ladder import (
    CHAT_BUILDERS,
    GuardPolicy,
    Send,
    run_ladder,
    settled_without_repair,
)
from reflexguard.core.loop_guard import guard_loops, out_of_time, settled_without_reask
from reflexguard.core.loops import NO_LOOPS, LoopIndex, scan
from reflexguard.core.model import JsonObject
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects.chat_request import ChatRequest, GroundingPolicy, request_of
from reflexguard.dialects.chat_stream import (
    StreamAssembler,
    closing_chunk_bodies,
    text_chunk_body,
)
from reflexguard.dialects.native import NATIVE_KEY, Dialect, echoing_builders, native_reply
from reflexguard.dialects.reader import dialect_request
from reflexguard.dialects.trajectory import steps_of
from reflexguard.ops import tracing
from reflexguard.ops.config import Settings
from reflexguard.ops.policy import grounding_policy, guard_policy, loop_policy, request_budget
from reflexguard.ops.telemetry import Telemetry, dumps

T = TypeVar("T")
# Forward the upstream's own chunk object, untouched.
FORWARD = None


def library_logger() -> Any:
    """In someone else's process, events go to the stdlib logger `reflexguard`, so the
    application's logging configuration decides (and nothing global is configured);
    below its level an event costs one check."""
    return structlog.wrap_logger(
        logging.getLogger("reflexguard"),
        processors=[structlog.stdlib.filter_by_level,
                    structlog.processors.JSONRenderer(serializer=lambda r, **_: dumps(r).decode())],
        wrapper_class=structlog.stdlib.BoundLogger,
    )


class Guard:
    """What every guarded call of one wrapped client shares: policy, caches, telemetry."""

    def __init__(self, settings: Settings, telemetry: Telemetry | None = None) -> None:
        self.settings = settings
        self.policy = guard_policy(settings)
        self.loops = loop_policy(settings)
        self.grounding = grounding_policy(settings)
        self.toolsets = ToolSetCache()
        if telemetry is None:
            telemetry = Telemetry(settings.events)
            telemetry.log = library_logger()
        self.telemetry = telemetry
        tracing.for_library(settings)  # OpenTelemetry, when on (docs/observability.md)

    def request(self, body: JsonObject, dialect: Dialect | None = None) -> GuardedRequest | None:
        """The guarded request, or None when there is nothing to guard (no tools). With a
        dialect, `body` is that dialect's native request, guarded as the proxy's native
        mode guards it."""
        if dialect is not None:
            return self._native_request(body, dialect)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return None  # the client or the upstream will reject it, as without us
        policy, grounding, spent = self._budgeted(body, "chat")
        try:
            chat = request_of(body, self.toolsets, grounding)
        except BadRequest as exc:
            # The proxy answers 400 here; in-process the request is the caller's to send,
            # so it goes unguarded, as it would without reflexguard (counted, logged).
            self.telemetry.warning_fallback("request_not_guarded", reason=str(exc))
            return None
        return GuardedRequest(self, chat, policy=policy, environment_errors=spent) \
            if chat.guarded else None

    def _native_request(self, body: JsonObject, dialect: Dialect) -> GuardedRequest | None:
        try:
            policy, grounding, spent = self._budgeted(body, dialect.name)
            native = dialect_request(body, dialect, self.toolsets, grounding)
        except BadRequest as exc:
            self.telemetry.warning_fallback("request_not_guarded", reason=str(exc),
                                            dialect=dialect.name)
            return None
        return GuardedRequest(self, native.chat, dialect, native.body, policy, spent) \
            if native.guarded else None

    def _budgeted(self, body: JsonObject,
                  dialect: str) -> tuple[GuardPolicy, GroundingPolicy, int]:
        """(policy, grounding, failures spent) under the `error_budget` setting (in-process
        there is no header); the configured ones when no budget is set."""
        budget = request_budget(None, dialect, body, self.settings)
        if budget is None:
            return self.policy, self.grounding, 0
        policy = policy_for_budget(self.policy, budget.remaining)
        grounding = self.grounding
        if policy.ground_entities and grounding.pattern is None:
            grounding = grounding_policy(self.settings, forced=True)
        return policy, grounding, budget.spent


class GuardedRequest:
    """One guarded request. Chat Completions by default; with a `dialect`, `body` is the
    native request, re-asks are written by the dialect's builders, and the answer is a
    native reply (the upstream's replies arrive already read by `completion_of`)."""

    def __init__(self, guard: Guard, chat: ChatRequest, dialect: Dialect | None = None,
                 body: JsonObject | None = None, policy: GuardPolicy | None = None,
                 environment_errors: int = 0) -> None:
        assert chat.rules is not None
        self.guard = guard
        self.policy = policy or guard.policy  # a low error budget escalates it
        self.environment_errors = environment_errors
        self.chat = chat
        self.rules = chat.rules
        self.dialect = dialect
        self.body = body if dialect is not None and body is not None else chat.body
        # The latest upstream reply, native: its thinking blocks / reasoning items are
        # echoed in the re-ask that answers it, as the proxy's native mode does.
        self.latest: JsonObject = {}
        self.builders = (CHAT_BUILDERS if dialect is None else
                         echoing_builders(dialect, lambda: dialect.reasoning_of(self.latest)))
        self.dialect_name = dialect.name if dialect is not None else "chat"
        self.request_id = f"rg-{uuid.uuid4().hex[:16]}"
        self.started = time.perf_counter()
        self._loop_index: LoopIndex | None = None

    def loop_index(self) -> LoopIndex:
        """The calls the conversation already repeats (core/loops.py), read once, and only
        with the loop guard on."""
        if self._loop_index is None:
            loops = self.guard.loops
            self._loop_index = NO_LOOPS
            if loops.on:
                steps, cut = steps_of(self.body, self.dialect_name)
                if cut:  # older steps unread (dialects/trajectory.py): counted
                    self.guard.telemetry.fallback("loop_scan_bound", request_id=self.request_id,
                                                  dialect=self.dialect_name)
                self._loop_index = scan(steps, loops.repeats)
        return self._loop_index

    @property
    def multiple_choices(self) -> bool:
        n = self.chat.body.get("n")
        return isinstance(n, int) and n > 1

    def first(self, completion: JsonObject, seconds: float) -> Attempt:
        return read_attempt(1, "initial", completion, self.rules,
                            self.policy.lift_text_calls, seconds)

    def on_attempt(self, attempt: Attempt) -> None:
        native = attempt.completion.get(NATIVE_KEY)
        if isinstance(native, dict):
            self.latest = native
        self.guard.telemetry.attempt(attempt, self.request_id, None, self.chat.model,
                                     self.rules.toolset.digest, self.chat.stream,
                                     self.dialect_name)
        tracing.hooks.attempt(self, attempt)

    def settled(self, first: Attempt) -> LadderResult | None:
        """The result without running the ladder, when no repair is called for."""
        result = settled_without_repair(first, self.policy)
        if result is not None:
            result = settled_without_reask(result, self.rules, self.guard.loops,
                                           self.loop_index(), self.policy.on_exhausted)
        if result is not None:  # None: the loop guard has a re-ask to make
            self.on_attempt(first)
            self._outcome(result)
        return result

    async def ladder(self, first: Attempt, send: Send) -> LadderResult:
        try:
            async with asyncio.timeout(self.guard.settings.request_timeout):
                result = await run_ladder(self.body, first, self.rules, self.policy,
                                          send, self.on_attempt, self.builders)
        except TimeoutError:
            result = LadderResult([first], "exhausted", ["request_deadline", "exhausted"])
        if self.guard.loops.on:  # a valid reply that repeats a call, within what time is left
            left = self.guard.settings.request_timeout - (time.perf_counter() - self.started)
            try:
                async with asyncio.timeout(max(0.0, left)):
                    result = await guard_loops(
                        self.body, result, self.rules, self.guard.loops, self.loop_index(),
                        send, self.on_attempt, self.policy.on_exhausted,
                        self.policy.reask_tokens, self.policy.lift_text_calls, self.builders)
            except TimeoutError:
                result = out_of_time(result, self.loop_index(), self.policy.on_exhausted,
                                     self.guard.loops)
        self._outcome(result)
        return result

    def _outcome(self, result: LadderResult) -> None:
        chosen = settle_choice(result, self.policy.on_exhausted)
        self.guard.telemetry.outcome(result.outcome, result.fallbacks, self.request_id, None,
                                     self.dialect_name, chosen=chosen)
        if result.loop is not None:
            self.guard.telemetry.loop(result.loop, self.request_id, None, self.dialect_name)

    def answer(self, result: LadderResult) -> JsonObject | None:
        """The completion (or, with a dialect, the native reply) the caller gets, or None
        for the upstream's own, untouched."""
        self.observe(result)
        returned = returned_attempt(result, self.policy.on_exhausted)
        first = result.attempts[0]
        if returned is first and not first.changed and not result.unused:
            return None
        if self.dialect is not None:
            return native_reply(self.dialect, self.body, result, returned)
        return agent_completion(result, returned)

    def observe(self, result: LadderResult) -> None:
        """Count the time spent in reflexguard; raise if the ladder ran out under
        `on_exhausted: error` (the proxy's 502 `tool_call_repair_exhausted`)."""
        tracing.hooks.decided(self, result)
        upstream = sum(a.upstream_seconds for a in result.attempts)
        added = max(0.0, time.perf_counter() - self.started - upstream)
        self.guard.telemetry.added_seconds.observe(added)
        if result.gave_up and self.policy.on_exhausted == "error":
            channels = sorted({str(v.channel) for v in result.final.verdict.violations})
            raise RepairExhausted(
                f"the model produced no valid tool call in {result.upstream_calls} attempts "
                f"({', '.join(channels)})", result)

    def stream(self) -> StreamGuard:
        return StreamGuard(self)


class StreamGuard:
    """A guarded stream's bookkeeping, for a driver that owns the iteration.

    `feed` says for each upstream chunk what goes out now: `FORWARD` (the upstream's own
    chunk object) and/or new chunk bodies. `closing` gives the chunks after the ladder.
    """

    def __init__(self, request: GuardedRequest) -> None:
        self.request = request
        self.assembler = StreamAssembler(hold_all_text=request.policy.lift_text_calls)
        self.began = time.perf_counter()

    def feed(self, chunk: JsonObject) -> list[JsonObject | None]:
        if "error" in chunk:
            self._cut(f"upstream error mid-stream: {chunk['error']}")
        out: list[JsonObject | None] = []
        if self.assembler.feed(chunk):
            out.append(FORWARD)
        if self.assembler.pending_flush is not None:
            out.append(text_chunk_body(self.assembler.template, self.assembler.pending_flush))
            self.assembler.pending_flush = None
        return out

    def first(self) -> Attempt:
        """The whole stream as the ladder's first attempt; raises if it did not finish."""
        if not self.assembler.template:
            self._cut("upstream stream carried no chat-completion chunk")
        if self.assembler.finish_reason is None:
            self._cut("upstream stream ended before the reply finished")
        return self.request.first(self.assembler.completion(), time.perf_counter() - self.began)

    def closing(self, result: LadderResult) -> list[JsonObject]:
        self.request.observe(result)
        final = returned_attempt(result, self.request.policy.on_exhausted)
        return closing_chunk_bodies(self.assembler, result, final)

    def broken(self, reason: str) -> UpstreamStreamCut:
        self.request.guard.telemetry.fallback("upstream_stream_cut",
                                              request_id=self.request.request_id)
        return UpstreamStreamCut(reason)

    def _cut(self, reason: str) -> None:
        raise self.broken(reason)


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `make()` (a coroutine) to completion from synchronous code.

    With no event loop in this thread, on a fresh one; with one already running (a sync
    client called from async code), on a fresh loop in a worker thread, since the
    caller's loop cannot be re-entered.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reflexguard") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
