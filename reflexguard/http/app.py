"""The HTTP edge: an aiohttp application in front of an OpenAI-compatible upstream.

Everything that decides lives in the pure modules; this file reads requests, calls the
upstream, and writes responses. Client mistakes and upstream faults are mapped to
OpenAI-format errors here, at the boundary, and never reach the client as tracebacks.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from reflexguard.core.bodies import UndecodableBody, decoded_body
from reflexguard.core.errors import BadRequest, error_body
from reflexguard.core.fixes import FixPolicy
from reflexguard.core.ladder import (
    Attempt,
    GuardPolicy,
    LadderResult,
    agent_completion,
    read_attempt,
    returned_attempt,
    run_ladder,
)
from reflexguard.core.limits import safe_label
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.urls import UnsafePath, passthrough_tail, redact
from reflexguard.dialects.chat_request import ChatRequest, GroundingPolicy, read_request
from reflexguard.http.responses import JSON, json_error, upstream_error
from reflexguard.http.streams import (
    STREAM_KEY,
    byte_stream,
    end_stream_with_error,
    guarded_stream,
)
from reflexguard.http.upstream import (
    AnswerTooDeep,
    Upstream,
    UpstreamFailure,
    UpstreamTimeout,
    parse_completion,
)
from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import Telemetry

UPSTREAM_KEY: web.AppKey[Upstream] = web.AppKey("upstream", Upstream)
# (HTTP status, body) for /healthz when something supervises the upstream (serve.py sets it
# for the embedded model: starting / ready / restarting / failed).
HealthCheck = Callable[[], tuple[int, dict[str, Any]]]


class Guard:
    """The request handlers, holding the state they share: caches, policy, telemetry."""

    def __init__(self, settings: Settings, upstream: Upstream, telemetry: Telemetry) -> None:
        self.settings = settings
        self.upstream = upstream
        self.telemetry = telemetry
        self.health: HealthCheck | None = None
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
            on_exhausted=settings.on_exhausted,
        )

    # -- routes ---------------------------------------------------------------------------

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            raw = await self._body(request)
            chat = read_request(raw, self.toolsets, self.grounding, self.settings.max_json_depth)
        except BadRequest as exc:
            return bad_request(exc)
        headers = self.upstream.headers(request.headers)
        if not chat.guarded:
            if chat.stream:
                return await self._pass_stream(request, raw, headers)
            return await self._pass(request, "chat/completions", raw, headers)
        session = request.headers.get("x-reflexguard-session")
        if session is None and isinstance(chat.body.get("user"), str):
            session = chat.body["user"]
        call = GuardedCall(self, chat, raw, headers,
                           safe_label(session) if session is not None else None, started)
        try:
            if chat.stream:
                return await guarded_stream(call, request)
            return await call.respond()
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client disconnects: the ladder stops.
            self.telemetry.client_gone(request_id=call.request_id, session=call.session)
            raise

    async def models(self, request: web.Request) -> web.StreamResponse:
        return await self._pass(request, "models", None, self.upstream.headers(request.headers))

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        """Any other /v1 route (completions, embeddings, ...), streamed if asked to be."""
        try:
            path = passthrough_tail(request.raw_path)
        except UnsafePath as exc:
            return json_error(400, str(exc), code="invalid_path")
        if request.query_string:
            path = f"{path}?{request.query_string}"
        try:
            body = await self._body(request) if request.can_read_body else None
        except BadRequest as exc:
            return bad_request(exc)
        headers = self.upstream.headers(request.headers)
        if body and b'"stream"' in body and _wants_stream(body):
            return await byte_stream(self, request, body, headers, path)
        return await self._pass(request, path, body, headers)

    async def healthz(self, _: web.Request) -> web.Response:
        body = {"status": "ok", "upstream": redact(self.upstream.base_url),
                "repair": self.settings.repair}
        if self.health is None:
            return web.json_response(body)
        status, supervised = self.health()
        return web.json_response({**body, **supervised}, status=status)

    async def metrics(self, request: web.Request) -> web.Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        return web.Response(body=self.telemetry.metrics_text(),
                            headers={"Content-Type": "text/plain; version=0.0.4"})

    async def session(self, request: web.Request) -> web.Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        session = request.match_info["session"]
        counts = self.telemetry.sessions.get(session)
        if counts is None:
            return json_error(404, f"no violations recorded for session {safe_label(session)!r}")
        return web.json_response({"session": session, "violations": counts})

    async def _body(self, request: web.Request) -> bytes:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body exceeds {self.settings.max_body_bytes} bytes",
                             status=413, code="request_too_large") from None
        return decoded_body(raw, request.headers.get("Content-Encoding"),
                            self.settings.max_body_bytes)

    def _denied(self, request: web.Request) -> web.Response | None:
        """The admin routes' bearer check, when `admin_token` is set."""
        token = self.settings.admin_token
        if token is None:
            return None
        given = request.headers.get("Authorization", "").encode("utf-8", "replace")
        expected = f"Bearer {token.get_secret_value()}".encode()
        if hmac.compare_digest(given, expected):
            return None
        return json_error(401, "this route needs 'Authorization: Bearer <admin_token>'",
                          code="unauthorized")

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


def bad_request(exc: BadRequest) -> web.Response:
    response = web.Response(status=exc.status, body=exc.body(), content_type=JSON)
    if isinstance(exc, UndecodableBody):
        # Where this body ends is unknown, so the connection cannot carry another request;
        # saying so lets clients reconnect instead of losing the requests queued behind.
        response.force_close()
    return response


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
        self.deadline = asyncio.get_running_loop().time() + guard.settings.request_timeout
        assert chat.rules is not None
        self.rules = chat.rules

    async def send(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.guard.upstream.completion(body, self.headers,
                                                    self.guard.settings.max_json_depth)

    def on_attempt(self, attempt: Attempt) -> None:
        self.guard.telemetry.attempt(attempt, self.request_id, self.session, self.chat.model,
                                     self.rules.toolset.digest, self.chat.stream)

    async def ladder(self, first: Attempt) -> LadderResult:
        try:
            async with asyncio.timeout_at(self.deadline):
                result = await run_ladder(self.chat.body, first, self.rules, self.guard.policy,
                                          self.send, self.on_attempt)
        except TimeoutError:
            # The deadline fell during repair: the agent gets the model's first answer (what
            # it would have had without reflexguard), or the exhausted error if so set.
            result = LadderResult([first], "exhausted", ["request_deadline", "exhausted"])
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
        if result.outcome != "exhausted" or self.guard.policy.on_exhausted != "error":
            return None
        channels = sorted({str(v.channel) for v in result.final.verdict.violations})
        return error_body(
            502, f"the model produced no valid tool call in {result.upstream_calls} attempts "
            f"({', '.join(channels)})", code="tool_call_repair_exhausted",
        )

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
        started: web.StreamResponse | None = request.get(STREAM_KEY)
        if started is not None and started.prepared:
            # Headers are gone: a second response would corrupt the chunked body.
            return await end_stream_with_error(started, "internal error in reflexguard")
        return json_error(500, "internal error in reflexguard; see its log", code="internal")


def build_app(settings: Settings, upstream_url: str | None = None,
              upstream: Upstream | None = None) -> web.Application:
    """`upstream`, when given, is used instead of one built from the URL (serve.py passes
    the supervised embedded child's, whose URL changes on restart)."""
    if upstream is None:
        url = upstream_url or settings.upstream
        if url is None:
            raise ValueError("no upstream URL")
        key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
        upstream = Upstream(url, key, settings.upstream_timeout,
                            settings.upstream_connect_timeout, settings.upstream_max_connections)
    telemetry = Telemetry(settings.events)
    guard = Guard(settings, upstream, telemetry)
    # auto_decompress off: bodies are decoded in `decoded_body`, bounded, with our errors.
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[openai_errors],
                          handler_args={"auto_decompress": False})
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
