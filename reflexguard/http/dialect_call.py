"""A guarded Messages or Responses request: native or translated to chat, one answer or
a stream.

An I/O edge. Native (the dialect is in `upstream_dialects`): the request goes to the same
route upstream, the native reply is read into the core's view, re-asks are written by the
dialect's builders, and a valid reply goes back as the upstream's own bytes. Translated:
the chat view is the request, sent to chat/completions, and the answer is written back in
the dialect. Either way the ladder, channels and telemetry are the chat ones.

Streams are dialect_stream.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from reflexguard.core.attempts import Attempt, LadderResult, read_attempt
from reflexguard.core.choice import agent_completion, returned_attempt
from reflexguard.core.errors import BadRequest
from reflexguard.core.ladder import CHAT_BUILDERS
from reflexguard.core.limits import clip, safe_label
from reflexguard.dialects.native import (
    Dialect,
    DialectRequest,
    echoing_builders,
    native_reply,
)
from reflexguard.dialects.native_clean import CLEAN_CALLS
from reflexguard.http.call import GuardedCall, exhausted_message
from reflexguard.http.context import GuardContext
from reflexguard.http.margins import RequestMargins
from reflexguard.http.responses import JSON
from reflexguard.http.upstream import (
    AnswerTooDeep,
    RequestDeadline,
    UpstreamFailure,
    UpstreamHTTPError,
    parse_completion,
)
from reflexguard.ops import tracing

SESSION_HEADERS = ("x-reflexguard-session", "x-claude-code-session-id", "session-id")


def session_of(request: web.Request, body: dict[str, Any]) -> str | None:
    """The agent's natural session id: our header, Claude Code's, Codex's, then the body."""
    for name in SESSION_HEADERS:
        if request.headers.get(name):
            return safe_label(request.headers[name])
    user = body.get("user")
    if not isinstance(user, str):
        metadata = body.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, dict) else None
    return safe_label(user) if isinstance(user, str) else None


def dialect_error(dialect: Dialect, status: int, message: str, param: str | None = None,
                  code: str | None = None, headers: dict[str, str] | None = None
                  ) -> web.Response:
    return web.Response(status=status, body=dialect.error_body(status, message, param, code),
                        content_type=JSON, headers=headers)


def dialect_bad_request(dialect: Dialect, exc: BadRequest) -> web.Response:
    return dialect_error(dialect, exc.status, str(exc), exc.param, exc.code)


def dialect_upstream_error(dialect: Dialect, exc: UpstreamFailure, native: bool) -> web.Response:
    """A native upstream's JSON error is already in the dialect: passed on as it is. Anything
    else (a chat upstream's error, an HTML page, a timeout) is said in the dialect."""
    if isinstance(exc, UpstreamHTTPError):
        try:
            value = orjson.loads(exc.body)
        except orjson.JSONDecodeError:
            value = None
        if native and isinstance(value, dict) and "error" in value:
            return web.Response(status=exc.status, body=exc.body, content_type=JSON)
        error = value.get("error") if isinstance(value, dict) else None
        message = (error.get("message") if isinstance(error, dict) else error) or \
            clip(exc.body.decode("utf-8", "replace").strip(), 200) or "an empty body"
        return dialect_error(dialect, exc.status, f"upstream answered {exc.status}: {message}",
                             code="upstream_error")
    return dialect_error(dialect, int(getattr(exc, "status", 502)), str(exc),
                         code="upstream_error")


@dataclass(frozen=True)
class CleanFirst:
    """A native first answer whose calls are all ok (dialects/native_clean.py): read no
    further, answered as the ladder would settle it (GuardedCall.clean)."""

    names: tuple[str, ...]
    seconds: float


class DialectCall(GuardedCall):
    """GuardedCall over a dialect: native re-asks, or the chat view when translated."""

    def __init__(self, guard: GuardContext, request: DialectRequest, raw: bytes,
                 dialect: Dialect, native: bool, query: str, headers: dict[str, str],
                 session: str | None, started: float) -> None:
        # The chat view's bytes are posted only when translated: a native call never
        # builds them (an encoding of the whole request per request, issue 23).
        chat_raw = b"{}" if native else orjson.dumps(
            {k: v for k, v in request.chat.body.items()
             if k not in ("stream", "stream_options")})
        super().__init__(guard, request.chat, chat_raw, headers, session, started)
        self.request = request
        self.raw_native = raw
        self.dialect_spec = dialect
        self.dialect = dialect.name
        self.native = native
        # The thinking blocks / reasoning items of the latest native reply, echoed in the
        # re-ask that answers it (a stream's first reply sets them from its events).
        self.reasoning: list[dict[str, Any]] = []
        # The re-ask builders (`ladder` sets a native call's): a clean answer needs none.
        self.builders = CHAT_BUILDERS
        self.path = f"{dialect.path}?{query}" if native and query else dialect.path
        self.first_bytes: bytes | None = None
        if native and self.margins.enabled:
            # A native Messages/Responses reply carries no chat-format logprobs. With
            # margins off, GuardedCall's is already this one (its body read only for them).
            self.margins = RequestMargins(False, request.chat.body, guard.telemetry,
                                          self.request_id)

    async def ladder(self, first: Attempt) -> LadderResult:
        if self.native:  # the dialect's re-asks, echoing the reasoning of what they answer
            self.builders = echoing_builders(self.dialect_spec, lambda: self.reasoning)
        return await super().ladder(first)

    def ladder_body(self) -> dict[str, Any]:
        return self.request.body if self.native else super().ladder_body()

    def client_body(self) -> dict[str, Any]:
        return self.request.body

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.native:
            return await super().send(body)
        raw = await self.guard.upstream.post_json(self.path, orjson.dumps(body), self.headers)
        reply = parse_completion(raw.body, self.guard.settings.max_json_depth)
        self.reasoning = self.dialect_spec.reasoning_of(reply)
        return self.dialect_spec.completion_of(reply)

    def clean_names(self, reply: dict[str, Any]) -> tuple[str, ...] | None:
        """The names of a native reply's calls when all are ok, under the conditions chat's
        shortcut has (GuardedCall.respond); None: read it in full. With OpenTelemetry on,
        the attempt's span is written from the chat view, which the shortcut never builds:
        read in full, so a trace reads the same either way (docs/decisions.md)."""
        shortcut = CLEAN_CALLS.get(self.dialect)
        if shortcut is None or self.margins.enabled or tracing.hooks.enabled or self.faults:
            return None
        names = shortcut(reply, self.rules)
        return None if names is not None and self.may_repeat(names) else names

    async def first(self) -> tuple[bytes, Attempt | CleanFirst]:
        """The first upstream answer, non-streamed, and its reading (or, for a native one
        whose calls are all ok, their names)."""
        began = time.perf_counter()
        depth = self.guard.settings.max_json_depth
        if self.native:
            answer = await self.guard.upstream.post_json(self.path, self.raw_native,
                                                         self.headers, self.deadline)
            self.first_bytes = answer.body  # for an answer too deep to read: sent as it came
            reply = parse_completion(answer.body, depth)
            names = self.clean_names(reply)
            if names is not None:
                return answer.body, CleanFirst(names, time.perf_counter() - began)
            self.reasoning = self.dialect_spec.reasoning_of(reply)
            completion = self.dialect_spec.completion_of(reply)
        else:
            answer = await self.guard.upstream.post_json("chat/completions", self.raw,
                                                         self.headers, self.deadline)
            completion = parse_completion(answer.body, depth)
        return answer.body, self.damaged(read_attempt(1, "initial", completion, self.rules,
                                                      self.guard.policy.lift_text_calls,
                                                      time.perf_counter() - began))

    def native_reply(self, result: LadderResult, returned: Attempt) -> dict[str, Any]:
        if self.native:
            return native_reply(self.dialect_spec, self.request.body, result, returned)
        completion = agent_completion(result, returned)
        return self.dialect_spec.native_of(completion, self.request.body, None)

    async def answer(self) -> web.StreamResponse:
        """The non-streamed answer."""
        try:
            # The deadline is the upstream client's own timeout, as on the chat route: an
            # asyncio.timeout around the request cost a tenth of the fast path's CPU.
            body, first = await self.first()
        except RequestDeadline:
            return dialect_upstream_error(self.dialect_spec, self.deadline_failure(),
                                          self.native)
        except AnswerTooDeep:
            self.guard.telemetry.fallback("answer_too_deep_not_guarded",
                                          request_id=self.request_id, dialect=self.dialect)
            if self.first_bytes is not None:  # native: the agent's answer, unguarded
                return web.Response(body=self.first_bytes, content_type=JSON)
            # Translated: a chat answer this deep cannot be written back in the dialect.
            return dialect_error(self.dialect_spec, 502, "upstream answer nests too deeply")
        except UpstreamFailure as exc:
            return dialect_upstream_error(self.dialect_spec, exc, self.native)
        if isinstance(first, CleanFirst):  # nothing to repair: the upstream's bytes as they came
            return self.clean(body, first.names, first.seconds)
        result = await self.ladder(first)
        headers = self.finish(result)
        message = exhausted_message(result, self.policy.on_exhausted)
        if message is not None:
            return dialect_error(self.dialect_spec, 502, message,
                                 code="tool_call_repair_exhausted", headers=headers)
        returned = returned_attempt(result, self.policy.on_exhausted)
        if self.native and returned is first and not first.changed and not result.unused:
            return web.Response(body=body, content_type=JSON, headers=headers)
        reply = self.native_reply(result, returned)
        return web.Response(body=orjson.dumps(reply), content_type=JSON, headers=headers)


async def translated_unguarded(guard: GuardContext, request: web.Request,
                               dialect_request: DialectRequest, dialect: Dialect,
                               headers: dict[str, str], deadline: float) -> web.StreamResponse:
    """A non-streamed request without tools to a chat-only upstream: translated both ways,
    nothing to validate (its stream twin is dialect_stream.translated_plain_stream);
    answered by `deadline` (the event loop's clock) or a 504."""
    chat = {k: v for k, v in dialect_request.chat.body.items()
            if k not in ("stream", "stream_options")}
    try:
        completion = await guard.upstream.completion(chat, headers,
                                                     guard.settings.max_json_depth, deadline)
    except UpstreamFailure as exc:
        if isinstance(exc, RequestDeadline):
            guard.telemetry.fallback("request_deadline")
        return dialect_upstream_error(dialect, exc, native=False)
    reply = dialect.native_of(completion, dialect_request.body, None)
    return web.Response(body=orjson.dumps(reply), content_type=JSON)

