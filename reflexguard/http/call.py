"""One guarded, non-streamed chat completion: its first answer, the ladder, the reply.

An I/O edge: the upstream is reached through the context's client, and the ladder is
handed `send`, so the decisions themselves stay in the core.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import orjson
from aiohttp import web

from reflexguard.core.attempts import Attempt, LadderResult, read_attempt
from reflexguard.core.budget import REMAINING_HEADER, policy_for_budget, within_budget
from reflexguard.core.choice import agent_completion, chosen_label, returned_attempt, settle_choice
from reflexguard.core.errors import error_body
from reflexguard.core.ladder import CHAT_BUILDERS, RequestBuilders, run_ladder
from reflexguard.core.loop_guard import guard_loops, out_of_time
from reflexguard.core.loops import NO_LOOPS, LoopIndex, scan
from reflexguard.core.validate import clean_tool_calls
from reflexguard.dialects.chat_request import ChatRequest, regrounded
from reflexguard.dialects.trajectory import steps_of
from reflexguard.http.context import GuardContext
from reflexguard.http.faults import RequestFaults, fault_seed
from reflexguard.http.margins import RequestMargins, with_logprobs
from reflexguard.http.responses import JSON, upstream_error
from reflexguard.http.upstream import (
    AnswerTooDeep,
    RequestDeadline,
    UpstreamFailure,
    UpstreamTimeout,
    parse_completion,
)
from reflexguard.ops import tracing
from reflexguard.ops.policy import grounding_policy, request_budget, spent_errors


class RandomIds:
    """64 random bits per request id, as uuid4().hex[:16] gave, from os.urandom drawn for
    POOL ids at once: one getrandom(2) and one hex() per POOL requests instead of one per
    request (issue 23). A forked process draws its own, never its parent's next ones."""

    POOL = 512

    def __init__(self) -> None:
        self._hex = ""
        self._at = 0
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._hex, self._at = "", 0

    def next(self) -> str:
        """16 fresh random hex digits (on the event loop's thread only: no lock)."""
        at = self._at
        if at >= len(self._hex):
            self._hex, at = os.urandom(8 * self.POOL).hex(), 0
        self._at = at + 16
        return self._hex[at:at + 16]


REQUEST_IDS = RandomIds()


class GuardedCall:
    """One guarded chat completion: its first attempt, ladder and telemetry."""

    # What the ladder re-asks with and in which dialect it is counted; a native dialect's
    # call (dialect_call.py) sets its own.
    builders: RequestBuilders = CHAT_BUILDERS
    dialect = "chat"

    def __init__(self, guard: GuardContext, chat: ChatRequest, raw: bytes, headers: dict[str, str],
                 session: str | None, started: float) -> None:
        self.guard = guard
        self.chat = chat
        self.raw = raw
        self.client_raw = raw  # `raw` as the client sent it, should `raw` gain logprobs
        self.headers = headers
        self.session = session
        self.started = started
        self.request_id = f"rg-{REQUEST_IDS.next()}"
        self.deadline = asyncio.get_running_loop().time() + guard.settings.request_timeout
        assert chat.rules is not None
        self.rules = chat.rules
        self.policy = guard.policy  # this request's: a low error budget escalates it
        self.environment_errors = 0  # failed tool results in the conversation, when read
        self.budget_remaining: int | None = None
        self.loops = guard.loops
        self._loop_index: LoopIndex | None = None  # read when first needed
        self.faults: RequestFaults | None = None  # inject_faults (testing): read_faults sets
        self.margins = RequestMargins(guard.settings.margins, chat.fields, guard.telemetry,
                                      self.request_id)
        if self.margins.inject:  # a copy with logprobs asked; the caller's bytes stay
            self.raw = orjson.dumps(with_logprobs(orjson.loads(raw)))
        tracing.hooks.begin(self)  # OpenTelemetry, when on (docs/observability.md)

    def client_body(self) -> dict[str, Any]:
        """The request as the client sent it, in `self.dialect`'s wire format, read for its
        conversation (its tools list may be left unparsed: ChatRequest.fields)."""
        return self.chat.fields

    def read_budget(self, header: str | None) -> None:
        """Apply the request's error budget, if one is known (docs/repair.md). Raises
        BadRequest when the header is not a budget."""
        budget = request_budget(header, self.dialect, self.client_body(), self.guard.settings)
        if budget is None:
            return
        self.environment_errors = budget.spent
        self.budget_remaining = budget.remaining
        self.policy = policy_for_budget(self.guard.policy, budget.remaining)
        if self.policy.ground_entities and self.rules.identifier_pattern is None:
            forced = grounding_policy(self.guard.settings, forced=True)
            self.chat = regrounded(self.chat, forced)
            assert self.chat.rules is not None
            self.rules = self.chat.rules

    def read_faults(self, header: str | None) -> None:
        """With `inject_faults` on (testing only), this request's faults, seeded by the spec
        or by its `x-reflexguard-fault-seed` header. Raises BadRequest for a bad seed."""
        spec = self.guard.settings.inject_faults
        if spec is not None:
            self.faults = RequestFaults(spec, self.rules, self.guard.telemetry,
                                        self.request_id, self.dialect, fault_seed(header))

    def damaged(self, first: Attempt) -> Attempt:
        """The first answer, with the faults injection puts on it (none when it is off)."""
        return first if self.faults is None else self.faults.first(self.client_body(), first)

    def session_errors(self) -> int | None:
        """The failures the environment reported, for the session record: read from the
        conversation when no budget already read them (one pass, and only for a session)."""
        if self.session is None:
            return None
        if self.budget_remaining is not None:
            return self.environment_errors
        return spent_errors(self.dialect, self.client_body(), self.guard.settings)

    def loop_index(self) -> LoopIndex:
        """The calls this request's conversation already repeats (core/loops.py), read from
        the client's body once, and only with the loop guard on."""
        if self._loop_index is None:
            self._loop_index = NO_LOOPS
            if self.loops.on:
                steps, cut = steps_of(self.client_body(), self.dialect)
                if cut:  # older steps unread (dialects/trajectory.py): counted
                    self.guard.telemetry.fallback("loop_scan_bound", request_id=self.request_id,
                                                  dialect=self.dialect)
                self._loop_index = scan(steps, self.loops.repeats)
        return self._loop_index

    def may_repeat(self, names: tuple[str, ...]) -> bool:
        """Whether a first answer whose calls are all ok may still repeat one: then it is
        read in full rather than taken by a clean-answer shortcut."""
        return self.loops.on and not self.loop_index().names.isdisjoint(names)

    async def guard_loops(self, result: LadderResult) -> LadderResult:
        """The loop guard after the ladder, within the request's deadline."""
        if not self.loops.on:
            return result
        index = self.loop_index()
        try:
            async with asyncio.timeout_at(self.deadline):
                return await guard_loops(self.ladder_body(), result, self.rules, self.loops,
                                         index, self.send, self.on_attempt,
                                         self.policy.on_exhausted, self.policy.reask_tokens,
                                         self.policy.lift_text_calls, self.builders)
        except TimeoutError:
            return out_of_time(result, index, self.policy.on_exhausted, self.loops)

    def budget_headers(self) -> dict[str, str]:
        if self.budget_remaining is None:
            return {}
        return {REMAINING_HEADER: str(self.budget_remaining)}

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.guard.upstream.completion(body, self.headers,
                                                    self.guard.settings.max_json_depth)

    def ladder_body(self) -> dict[str, Any]:
        """The request the ladder's re-asks extend, in the wire format `send` posts."""
        return self.margins.body(self.chat.body)

    def on_attempt(self, attempt: Attempt) -> None:
        self.guard.telemetry.attempt(attempt, self.request_id, self.session, self.chat.model,
                                     self.rules.toolset.digest, self.chat.stream, self.dialect,
                                     margins=self.margins.of(attempt),
                                     margin_threshold=self.guard.settings.margin_threshold)
        tracing.hooks.attempt(self, attempt)

    async def ladder(self, first: Attempt) -> LadderResult:
        try:
            async with asyncio.timeout_at(self.deadline):
                result = await run_ladder(self.ladder_body(), first, self.rules,
                                          self.policy, self.send, self.on_attempt,
                                          self.builders,
                                          self.faults.reask if self.faults else None)
        except TimeoutError:
            # The deadline fell during repair: the agent gets the model's first answer (what
            # it would have had without reflexguard), or the exhausted error if so set.
            result = LadderResult([first], "exhausted", ["request_deadline", "exhausted"])
        result = await self.guard_loops(result)  # a valid reply that repeats a call
        # No more invalid parallel calls passed on than the error budget can take (repair.md).
        result, self.policy = within_budget(result, self.policy, self.budget_remaining,
                                            self.rules)
        chosen = settle_choice(result, self.policy.on_exhausted)
        self.guard.telemetry.outcome(result.outcome, result.fallbacks, self.request_id,
                                     self.session, self.dialect,
                                     environment_errors=self.session_errors(), chosen=chosen)
        if result.loop is not None:
            self.guard.telemetry.loop(result.loop, self.request_id, self.session, self.dialect)
        return result

    def finish(self, result: LadderResult) -> dict[str, str]:
        tracing.hooks.decided(self, result)
        upstream = sum(a.upstream_seconds for a in result.attempts)
        chosen = chosen_label(result, self.policy.on_exhausted)
        return self.finished(upstream, result.upstream_calls, result.violations, chosen)

    def finished(self, upstream_seconds: float, attempts: int, violations: int,
                 chosen: str = "1") -> dict[str, str]:
        """The time reflexguard added, observed, and the guarded answer's headers."""
        added = max(0.0, time.perf_counter() - self.started - upstream_seconds)
        self.guard.telemetry.added_seconds.observe(added)
        return {
            "x-reflexguard-attempts": str(attempts),
            "x-reflexguard-violations": str(violations),
            "x-reflexguard-chosen-attempt": chosen,
            "x-reflexguard-request-id": self.request_id,
            "x-reflexguard-overhead-ms": f"{added * 1000:.3f}",
            **self.budget_headers(),
        }

    def exhausted_error(self, result: LadderResult) -> bytes | None:
        message = exhausted_message(result, self.policy.on_exhausted)
        if message is None:
            return None
        return error_body(502, message, code="tool_call_repair_exhausted")

    async def respond(self) -> web.Response:
        began = time.perf_counter()
        try:
            answer = await self.guard.upstream.post_json("chat/completions", self.raw,
                                                         self.headers, self.deadline)
            completion = parse_completion(answer.body, self.guard.settings.max_json_depth)
        except RequestDeadline:
            return upstream_error(self.deadline_failure())
        except AnswerTooDeep:
            self.guard.telemetry.fallback("answer_too_deep_not_guarded",
                                          request_id=self.request_id)
            return web.Response(body=answer.body, content_type=JSON)
        except UpstreamFailure as exc:
            return upstream_error(exc)
        if not self.margins.enabled and self.faults is None:
            names = clean_tool_calls(completion, self.rules)
            if names is not None and not self.may_repeat(names):
                # nothing to repair: the upstream's bytes, as they came
                return self.clean(answer.body, names, time.perf_counter() - began)
        first = self.damaged(read_attempt(1, "initial", completion, self.rules,
                                          self.policy.lift_text_calls,
                                          time.perf_counter() - began))
        result = await self.ladder(first)
        headers = self.finish(result)
        failure = self.exhausted_error(result)
        if failure is not None:
            return web.Response(status=502, body=failure, content_type=JSON, headers=headers)
        returned = returned_attempt(result, self.policy.on_exhausted)
        body = answer.body  # the fast path: the upstream's own bytes, untouched
        if returned is not first or first.changed or result.unused:
            try:
                body = orjson.dumps(self.margins.outgoing(agent_completion(result, returned)))
            except (TypeError, RecursionError):
                # orjson writes 254 levels: an answer deeper than that goes out as it came.
                self.guard.telemetry.fallback("unencodable_answer", request_id=self.request_id)
        elif self.margins.inject:  # the logprobs we asked for are ours, not the agent's
            body = orjson.dumps(self.margins.outgoing(completion))
        return web.Response(body=body, content_type=JSON, headers=headers)

    def clean(self, body: bytes, names: tuple[str, ...], seconds: float) -> web.Response:
        """The answer for a first reply whose calls are all ok: as the ladder would settle
        it ("clean"), recorded the same way, without reading it into replies."""
        telemetry = self.guard.telemetry
        tracing.hooks.clean(self, body)
        telemetry.clean_answer(names, self.request_id, self.session, self.chat.model,
                               self.rules.toolset.digest, self.chat.stream, self.dialect,
                               seconds, self.session_errors())
        headers = self.finished(seconds, attempts=1, violations=0)
        headers["Content-Type"] = JSON  # the same header content_type= sets, set once
        return web.Response(body=body, headers=headers)

    def deadline_failure(self) -> UpstreamTimeout:
        self.guard.telemetry.fallback("request_deadline", request_id=self.request_id,
                                      session=self.session)
        return UpstreamTimeout(f"no answer within request_timeout "
                               f"({self.guard.settings.request_timeout:g} s)")


def exhausted_message(result: LadderResult, on_exhausted: str) -> str | None:
    """The error text after a ladder that gave up with `on_exhausted: error`, else None."""
    if not result.gave_up or on_exhausted != "error":
        return None
    channels = sorted({str(v.channel) for v in result.final.verdict.violations})
    return (f"the model produced no valid tool call in {result.upstream_calls} attempts "
            f"({', '.join(channels)})")
