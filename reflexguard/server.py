"""The HTTP edge: an aiohttp application in front of an OpenAI-compatible upstream.

Everything that decides lives in the pure modules; this file reads requests, calls the
upstream, and writes responses. Client mistakes and upstream faults are mapped to
OpenAI-format errors here, at the boundary, and never reach the client as tracebacks.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from reflexguard.config import Settings
from reflexguard.errors import BadRequest, error_body
from reflexguard.fixes import FixPolicy
from reflexguard.guard import (
    Attempt,
    GuardPolicy,
    LadderResult,
    agent_completion,
    read_attempt,
    returned_attempt,
    run_ladder,
)
from reflexguard.request import ChatRequest, GroundingPolicy, read_request
from reflexguard.responses import JSON, json_error, upstream_error
from reflexguard.stream_handler import byte_stream, guarded_stream
from reflexguard.telemetry import Telemetry
from reflexguard.toolset import ToolSetCache
from reflexguard.upstream import (
    Upstream,
    UpstreamFailure,
    parse_completion,
)

UPSTREAM_KEY: web.AppKey[Upstream] = web.AppKey("upstream", Upstream)


class Guard:
    """The request handlers, holding the state they share: caches, policy, telemetry."""

    def __init__(self, settings: Settings, upstream: Upstream, telemetry: Telemetry) -> None:
        self.settings = settings
        self.upstream = upstream
        self.telemetry = telemetry
        self.toolsets = ToolSetCache()
        self.grounding = GroundingPolicy(
            pattern=re.compile(settings.grounding_pattern) if settings.grounding else None,
            include_system=settings.grounding_include_system,
        )
        self.policy = GuardPolicy(
            repair=settings.repair,
            max_repairs=settings.max_repairs,
            constrained=settings.constrained_retry,
            fixes=FixPolicy(
                json_repair=settings.json_repair,
                snap_names=settings.snap_names,
                snap_threshold=settings.snap_threshold,
            ),
            lift_text_calls=settings.tool_call_format == "content",
        )

    # -- routes ---------------------------------------------------------------------------

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return json_error(413, f"request body exceeds {self.settings.max_body_bytes} bytes",
                              code="request_too_large")
        try:
            chat = read_request(raw, self.toolsets, self.grounding)
        except BadRequest as exc:
            return web.Response(status=exc.status, body=exc.body(), content_type=JSON)
        headers = self.upstream.headers(request.headers)
        if not chat.guarded:
            if chat.stream:
                return await self._pass_stream(request, raw, headers)
            return await self._pass(request, "chat/completions", raw, headers)
        session = request.headers.get("x-reflexguard-session")
        if session is None and isinstance(chat.body.get("user"), str):
            session = chat.body["user"]
        call = GuardedCall(self, chat, raw, headers, session, started)
        if chat.stream:
            return await guarded_stream(call, request)
        return await call.respond()

    async def models(self, request: web.Request) -> web.StreamResponse:
        return await self._pass(request, "models", None, self.upstream.headers(request.headers))

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        """Any other /v1 route (completions, embeddings, ...), streamed if asked to be."""
        body = await request.read() if request.can_read_body else None
        path = request.match_info["tail"]
        headers = self.upstream.headers(request.headers)
        if body and b'"stream"' in body and _wants_stream(body):
            return await byte_stream(self, request, body, headers, path)
        return await self._pass(request, path, body, headers)

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "upstream": self.upstream.base_url,
                                  "repair": self.settings.repair})

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self.telemetry.metrics_text(),
                            headers={"Content-Type": "text/plain; version=0.0.4"})

    async def session(self, request: web.Request) -> web.Response:
        session = request.match_info["session"]
        counts = self.telemetry.sessions.get(session)
        if counts is None:
            return json_error(404, f"no violations recorded for session {session!r}")
        return web.json_response({"session": session, "violations": counts})

    # -- pass-through -----------------------------------------------------------------------

    async def _pass(self, request: web.Request, path: str, body: bytes | None,
                    headers: dict[str, str]) -> web.StreamResponse:
        try:
            raw = await self.upstream.request(request.method, path, body, headers)
        except UpstreamFailure as exc:
            return upstream_error(exc)
        return web.Response(status=raw.status, body=raw.body,
                            headers={"Content-Type": raw.content_type or JSON})

    async def _pass_stream(self, request: web.Request, raw: bytes,
                           headers: dict[str, str]) -> web.StreamResponse:
        return await byte_stream(self, request, raw, headers)


def _wants_stream(body: bytes) -> bool:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True


GUARD_KEY: web.AppKey[Guard] = web.AppKey("guard", Guard)


class GuardedCall:
    """One guarded chat completion: its first attempt, ladder and telemetry."""

    def __init__(self, guard: Guard, chat: ChatRequest, raw: bytes, headers: dict[str, str],
                 session: str | None, started: float) -> None:
        self.guard = guard
        self.chat = chat
        self.raw = raw
        self.headers = headers
        self.session = session
        self.started = started
        self.request_id = f"rg-{uuid.uuid4().hex[:16]}"
        assert chat.rules is not None
        self.rules = chat.rules

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.guard.upstream.completion(body, self.headers)

    def on_attempt(self, attempt: Attempt) -> None:
        self.guard.telemetry.attempt(attempt, self.request_id, self.session, self.chat.model,
                                     self.rules.toolset.digest, self.chat.stream)

    async def ladder(self, first: Attempt) -> LadderResult:
        result = await run_ladder(self.chat.body, first, self.rules, self.guard.policy,
                                  self.send, self.on_attempt)
        self.guard.telemetry.outcome(result.outcome, result.fallbacks, self.request_id,
                                     self.session)
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
        if result.outcome != "exhausted" or self.guard.settings.on_exhausted != "error":
            return None
        channels = sorted({str(v.channel) for v in result.final.verdict.violations})
        return error_body(
            502, f"the model produced no valid tool call in {result.upstream_calls} attempts "
            f"({', '.join(channels)})", code="tool_call_repair_exhausted",
        )

    async def respond(self) -> web.Response:
        began = time.perf_counter()
        try:
            answer = await self.guard.upstream.post_json("chat/completions", self.raw,
                                                         self.headers)
            completion = parse_completion(answer.body)
        except UpstreamFailure as exc:
            return upstream_error(exc)
        first = read_attempt(1, "initial", completion, self.rules,
                             self.guard.policy.lift_text_calls, time.perf_counter() - began)
        result = await self.ladder(first)
        headers = self.finish(result)
        failure = self.exhausted_error(result)
        if failure is not None:
            return web.Response(status=502, body=failure, content_type=JSON, headers=headers)
        returned = returned_attempt(result, self.guard.settings.on_exhausted)
        if returned is first and not first.changed:
            body = answer.body  # the fast path: the upstream's own bytes, untouched
        else:
            body = orjson.dumps(agent_completion(result, returned))
        return web.Response(body=body, content_type=JSON, headers=headers)


@web.middleware
async def openai_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return json_error(exc.status, exc.reason or "error")
    except Exception:
        request.app[GUARD_KEY].telemetry.log.exception("unhandled", path=request.path)
        return json_error(500, "internal error in reflexguard; see its log", code="internal")


def build_app(settings: Settings, upstream_url: str | None = None) -> web.Application:
    url = upstream_url or settings.upstream
    if url is None:
        raise ValueError("no upstream URL")
    key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
    upstream = Upstream(url, key, settings.upstream_timeout, settings.upstream_connect_timeout,
                        settings.upstream_max_connections)
    telemetry = Telemetry(settings.events)
    guard = Guard(settings, upstream, telemetry)
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[openai_errors])
    app[UPSTREAM_KEY] = upstream
    app[GUARD_KEY] = guard

    async def start(_: web.Application) -> None:
        await upstream.start()

    async def stop(_: web.Application) -> None:
        await upstream.close()
        telemetry.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/chat/completions", guard.chat_completions)
    app.router.add_get("/v1/models", guard.models)
    app.router.add_get("/healthz", guard.healthz)
    app.router.add_get("/metrics", guard.metrics)
    app.router.add_get("/reflexguard/sessions/{session}", guard.session)
    app.router.add_route("*", "/v1/{tail:.*}", guard.passthrough)
    return app
