"""One guarded, non-streamed chat completion: its first answer, the ladder, the reply.

An I/O edge: the upstream is reached through the context's client, and the ladder is
handed `send`, so the decisions themselves stay in the core.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from reflexguard.core.errors import error_body
from reflexguard.core.ladder import (
    CHAT_BUILDERS,
    Attempt,
    LadderResult,
    RequestBuilders,
    agent_completion,
    read_attempt,
    returned_attempt,
    run_ladder,
)
from reflexguard.dialects.chat_request import ChatRequest
from reflexguard.http.context import GuardContext
from reflexguard.http.responses import JSON, upstream_error
from reflexguard.http.upstream import (
    AnswerTooDeep,
    UpstreamFailure,
    UpstreamTimeout,
    parse_completion,
)


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
        self.headers = headers
        self.session = session
        self.started = started
        self.request_id = f"rg-{uuid.uuid4().hex[:16]}"
        self.deadline = asyncio.get_running_loop().time() + guard.settings.request_timeout
        assert chat.rules is not None
        self.rules = chat.rules

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.guard.upstream.completion(body, self.headers,
                                                    self.guard.settings.max_json_depth)

    def ladder_body(self) -> dict[str, Any]:
        """The request the ladder's re-asks extend, in the wire format `send` posts."""
        return self.chat.body

    def on_attempt(self, attempt: Attempt) -> None:
        self.guard.telemetry.attempt(attempt, self.request_id, self.session, self.chat.model,
                                     self.rules.toolset.digest, self.chat.stream, self.dialect)

    async def ladder(self, first: Attempt) -> LadderResult:
        try:
            async with asyncio.timeout_at(self.deadline):
                result = await run_ladder(self.ladder_body(), first, self.rules,
                                          self.guard.policy, self.send, self.on_attempt,
                                          self.builders)
        except TimeoutError:
            # The deadline fell during repair: the agent gets the model's first answer (what
            # it would have had without reflexguard), or the exhausted error if so set.
            result = LadderResult([first], "exhausted", ["request_deadline", "exhausted"])
        self.guard.telemetry.outcome(result.outcome, result.fallbacks, self.request_id,
                                     self.session, self.dialect)
        return result

    def finish(self, result: LadderResult) -> dict[str, str]:
        upstream = sum(a.upstream_seconds for a in result.attempts)
        added = max(0.0, time.perf_counter() - self.started - upstream)
        self.guard.telemetry.added_seconds.observe(added)
        return {
            "x-reflexguard-attempts": str(result.upstream_calls),
            "x-reflexguard-violations": str(result.violations),
            "x-reflexguard-request-id": self.request_id,
        }

    def exhausted_error(self, result: LadderResult) -> bytes | None:
        message = exhausted_message(result, self.guard.policy.on_exhausted)
        if message is None:
            return None
        return error_body(502, message, code="tool_call_repair_exhausted")

    async def respond(self) -> web.Response:
        began = time.perf_counter()
        try:
            async with asyncio.timeout_at(self.deadline):
                answer = await self.guard.upstream.post_json("chat/completions", self.raw,
                                                             self.headers)
            completion = parse_completion(answer.body, self.guard.settings.max_json_depth)
        except TimeoutError:
            return upstream_error(self.deadline_failure())
        except AnswerTooDeep:
            self.guard.telemetry.fallback("answer_too_deep_not_guarded",
                                          request_id=self.request_id)
            return web.Response(body=answer.body, content_type=JSON)
        except UpstreamFailure as exc:
            return upstream_error(exc)
        first = read_attempt(1, "initial", completion, self.rules,
                             self.guard.policy.lift_text_calls, time.perf_counter() - began)
        result = await self.ladder(first)
        headers = self.finish(result)
        failure = self.exhausted_error(result)
        if failure is not None:
            return web.Response(status=502, body=failure, content_type=JSON, headers=headers)
        returned = returned_attempt(result, self.guard.policy.on_exhausted)
        body = answer.body  # the fast path: the upstream's own bytes, untouched
        if returned is not first or first.changed:
            try:
                body = orjson.dumps(agent_completion(result, returned))
            except (TypeError, RecursionError):
                # orjson writes 254 levels: an answer deeper than that goes out as it came.
                self.guard.telemetry.fallback("unencodable_answer", request_id=self.request_id)
        return web.Response(body=body, content_type=JSON, headers=headers)

    def deadline_failure(self) -> UpstreamTimeout:
        self.guard.telemetry.fallback("request_deadline", request_id=self.request_id,
                                      session=self.session)
        return UpstreamTimeout(f"no answer within request_timeout "
                               f"({self.guard.settings.request_timeout:g} s)")


def exhausted_message(result: LadderResult, on_exhausted: str) -> str | None:
    """The error text after an exhausted ladder with `on_exhausted: error`, else None."""
    if result.outcome != "exhausted" or on_exhausted != "error":
        return None
    channels = sorted({str(v.channel) for v in result.final.verdict.violations})
    return (f"the model produced no valid tool call in {result.upstream_calls} attempts "
            f"({', '.join(channels)})")
