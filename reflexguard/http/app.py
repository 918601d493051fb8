"""The HTTP edge: the aiohttp application, its routes and its error middleware.

Everything that decides lives in the core; this file reads requests, hands guarded ones
to `call` (one answer) or `streams` (a stream), and writes responses. Client mistakes
and upstream faults become OpenAI-format errors at this boundary, never tracebacks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import hmac
import time
from collections.abc import Coroutine
from typing import Any

import orjson
from aiohttp import web

from reflexguard.core.bodies import UndecodableBody, decoded_body
from reflexguard.core.budget import BUDGET_HEADER
from reflexguard.core.errors import BadRequest
from reflexguard.core.limits import safe_label
from reflexguard.core.toolset import CompileNeeded
from reflexguard.core.urls import UnsafePath, passthrough_tail, redact
from reflexguard.dialects.chat_request import ChatRequest, read_request
from reflexguard.dialects.history import has_calls, repaired
from reflexguard.dialects.messages import MESSAGES
from reflexguard.dialects.native import Dialect, DialectRequest, read_dialect_request
from reflexguard.dialects.responses import RESPONSES
from reflexguard.http.call import GuardedCall
from reflexguard.http.connections import BodyTimeout, protocol_error_body, read_body_within
from reflexguard.http.context import GuardContext
from reflexguard.http.dialect_call import (
    DialectCall,
    dialect_bad_request,
    dialect_upstream_error,
    session_of,
    translated_unguarded,
)
from reflexguard.http.dialect_stream import dialect_stream, translated_plain_stream
from reflexguard.http.faults import FAULT_SEED_HEADER
from reflexguard.http.health import PROBE_TIMEOUT, UpstreamHealth
from reflexguard.http.responses import JSON, json_error, upstream_error
from reflexguard.http.streams import (
    STREAM_KEY,
    byte_stream,
    end_stream_with_error,
    guarded_stream,
)
from reflexguard.http.upstream import RequestDeadline, Upstream, UpstreamFailure
from reflexguard.ops import tracing
from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import Telemetry

UPSTREAM_KEY: web.AppKey[Upstream] = web.AppKey("upstream", Upstream)


class Routes(GuardContext):
    """The request handlers, over the context they share."""

    upstream_health: UpstreamHealth  # set by build_app

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            raw = await self._body(request)
            try:
                chat = read_request(raw, self.toolsets, self.grounding,
                                    self.settings.max_json_depth)
            except CompileNeeded as miss:  # a new tool set: compiled off the loop (issue 18)
                await self.compile_tools(miss)
                chat = read_request(raw, self.toolsets, self.grounding,
                                    self.settings.max_json_depth)
        except BadRequest as exc:
            return bad_request(exc)
        raw, chat = self._chat_history(raw, chat)
        headers = self.upstream.headers(request.headers)
        if not chat.guarded:
            if chat.stream:
                return await self._pass_stream(request, raw, headers)
            return await self._pass(request, "chat/completions", raw, headers)
        session = request.headers.get("x-reflexguard-session")
        if session is None and isinstance(chat.fields.get("user"), str):
            session = chat.fields["user"]
        call = GuardedCall(self, chat, raw, headers,
                           safe_label(session) if session is not None else None, started)
        try:
            call.read_budget(request.headers.get(BUDGET_HEADER))
            call.read_faults(request.headers.get(FAULT_SEED_HEADER))
        except BadRequest as exc:
            return bad_request(exc)
        try:
            if chat.stream:
                return await guarded_stream(call, request)
            return await call.respond()
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client disconnects: the ladder stops.
            self.telemetry.client_gone(request_id=call.request_id, session=call.session)
            raise

    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._dialect(request, MESSAGES)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._dialect(request, RESPONSES)

    async def _dialect(self, request: web.Request, dialect: Dialect) -> web.StreamResponse:
        """Anthropic Messages or OpenAI Responses, guarded over the same core."""
        started = time.perf_counter()
        try:
            raw = await self._body(request)
            try:
                parsed = read_dialect_request(raw, dialect, self.toolsets, self.grounding,
                                              self.settings.max_json_depth)
            except CompileNeeded as miss:  # a new tool set: compiled off the loop (issue 18)
                await self.compile_tools(miss)
                parsed = read_dialect_request(raw, dialect, self.toolsets, self.grounding,
                                              self.settings.max_json_depth)
        except BadRequest as exc:
            response = dialect_bad_request(dialect, exc)
            if isinstance(exc, UndecodableBody):
                response.force_close()
            return response
        raw, parsed = self._dialect_history(raw, parsed, dialect)
        headers = self.upstream.headers(request.headers)
        native = dialect.name in self.settings.upstream_dialects
        if not native and parsed.dropped:
            # Fields a chat upstream has no place for (thinking, cache_control, built-in
            # tools): the translation loses them, so it is said, counted and logged.
            self.telemetry.fallback("translation_dropped_fields", dialect=dialect.name,
                                    fields=list(parsed.dropped)[:20])
        if not parsed.guarded:
            if not native and parsed.chat.stream:
                return await self._within_deadline(request, translated_plain_stream(
                    self, request, parsed, dialect, headers))
            if not native:
                return await translated_unguarded(self, request, parsed, dialect, headers,
                                                  self._deadline())
            path = (f"{dialect.path}?{request.query_string}" if request.query_string
                    else dialect.path)
            if parsed.chat.stream:
                return await self._within_deadline(request, byte_stream(
                    self, request, raw, headers, path))
            try:  # as _pass, but a fault is said in the dialect's error format
                answer = await self.upstream.request("POST", path, raw, headers,
                                                     self._deadline())
            except UpstreamFailure as exc:
                return dialect_upstream_error(dialect, self._counted(exc), native=True)
            return web.Response(status=answer.status, body=answer.body,
                                headers={"Content-Type": answer.content_type or JSON})
        call = DialectCall(self, parsed, raw, dialect, native, request.query_string, headers,
                           session_of(request, parsed.body), started)
        try:
            call.read_budget(request.headers.get(BUDGET_HEADER))
            call.read_faults(request.headers.get(FAULT_SEED_HEADER))
        except BadRequest as exc:
            return dialect_bad_request(dialect, exc)
        try:
            if parsed.chat.stream:
                return await dialect_stream(call, request)
            return await call.answer()
        except asyncio.CancelledError:
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
            return await self._within_deadline(request, byte_stream(
                self, request, body, headers, path))
        return await self._pass(request, path, body, headers)

    async def healthz(self, _: web.Request) -> web.Response:
        body = {"status": "ok", "upstream": redact(self.upstream.base_url),
                "repair": self.settings.repair}
        body.update(self.faults_notice())
        if self.health is None:
            return web.json_response(body)
        status, supervised = self.health()
        return web.json_response({**body, **supervised}, status=status)

    def faults_notice(self) -> dict[str, str]:
        """Said on /healthz and /readyz while fault injection is on: never silently."""
        spec = self.settings.inject_faults
        return {} if spec is None else {"inject_faults": spec.text(),
                                        "warning": "fault injection is on (testing only)"}

    async def livez(self, _: web.Request) -> web.Response:
        """The process serves: nothing else is asked (an orchestrator's liveness probe)."""
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        """The upstream answered recently (http/health.py), or the embedded model is ready:
        200, else 503 with the reason."""
        if self.health is not None:  # the supervised embedded child
            status, supervised = self.health()
            body: dict[str, object] = {"status": "ready" if status == 200 else "not_ready",
                                       "upstream": supervised.get("upstream"),
                                       "embedded": supervised.get("status")}
            if status != 200:
                body["reason"] = supervised.get("reason")
            return web.json_response({**body, **self.faults_notice()}, status=status)
        outcome = await self.upstream_health.ready(
            lambda: self.upstream.probe(PROBE_TIMEOUT))
        body = {"status": "ready" if outcome.answered else "not_ready",
                "upstream": redact(self.upstream.base_url), "checked_by": outcome.source,
                "age_s": round(max(0.0, time.monotonic() - outcome.at), 3)}
        if not outcome.answered:
            body["reason"] = outcome.reason
        return web.json_response({**body, **self.faults_notice()},
                                 status=200 if outcome.answered else 503)

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
        record, source = await self.sessions.read(session)
        if record is None:
            response = json_error(404, f"no session recorded as {safe_label(session)!r}")
        else:
            response = web.json_response(record.model_dump())
        # Said in a header, not the body: the body is the same from every replica.
        response.headers["x-reflexguard-state"] = source
        return response

    async def _body(self, request: web.Request) -> bytes:
        try:
            if request.content.is_eof():  # all here already: no timer to arm
                raw = await request.read()
            else:
                raw = await read_body_within(request, self.settings.body_timeout)
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body exceeds {self.settings.max_body_bytes} bytes",
                             status=413, code="request_too_large") from None
        except BodyTimeout:
            self.telemetry.connection_refused("body_timeout")
            raise
        return decoded_body(raw, request.headers.get("Content-Encoding"),
                            self.settings.max_body_bytes)

    def _chat_history(self, raw: bytes, chat: ChatRequest) -> tuple[bytes, ChatRequest]:
        """The bytes to forward and the request read from them: the client's, unless a
        historical tool call would make the model server refuse the conversation
        (dialects/history.py); then a repaired copy, counted as history_repaired."""
        if not has_calls(raw, "chat", chat.tools_span):  # the fast path: a bytes scan
            return raw, chat
        fixed = repaired(chat.fields, "chat", chat.tools_raw)
        if fixed is None:
            return raw, chat
        forwarded, fields, report = fixed
        self.telemetry.history_repaired(report.kinds, "chat", report.left_as_sent)
        return forwarded, dataclasses.replace(chat, fields=fields)

    def _dialect_history(self, raw: bytes, parsed: DialectRequest, dialect: Dialect,
                         ) -> tuple[bytes, DialectRequest]:
        """As _chat_history, for Messages and Responses (their chat view translated again)."""
        if not has_calls(raw, dialect.name):
            return raw, parsed
        fixed = repaired(parsed.body, dialect.name)
        if fixed is None:
            return raw, parsed
        forwarded, body, report = fixed
        self.telemetry.history_repaired(report.kinds, dialect.name, report.left_as_sent)
        chat_view, _ = dialect.to_chat(body)  # the same tools: the same rules, as read
        return forwarded, DialectRequest(body, dataclasses.replace(parsed.chat,
                                                                   fields=chat_view),
                                         parsed.dropped)

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
            raw = await self.upstream.request(request.method, path, body, headers,
                                              self._deadline())
        except UpstreamFailure as exc:
            return upstream_error(self._counted(exc))
        return web.Response(status=raw.status, body=raw.body,
                            headers={"Content-Type": raw.content_type or JSON})

    async def _pass_stream(self, request: web.Request, raw: bytes,
                           headers: dict[str, str]) -> web.StreamResponse:
        return await self._within_deadline(request, byte_stream(self, request, raw, headers))

    # -- the request deadline of requests without tools (issue 30) ----------------------------
    # `request_timeout` bounds every client request, not only guarded ones: a pass-through
    # answer or stream (an SSE comment a second keeps a socket busy forever) ends at it too.

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.settings.request_timeout

    def _counted(self, exc: UpstreamFailure) -> UpstreamFailure:
        """`exc`, counted as a request_deadline fallback when the deadline caused it."""
        if isinstance(exc, RequestDeadline):
            self.telemetry.fallback("request_deadline")
        return exc

    async def _within_deadline(self, request: web.Request,
                               stream: Coroutine[Any, Any, web.StreamResponse],
                               ) -> web.StreamResponse:
        """A pass-through stream, ended at the request deadline: a 504 in the route's
        format before its first byte, its error event after (the upstream request is
        cancelled, which closes its connection)."""
        try:
            async with asyncio.timeout(self.settings.request_timeout):
                return await stream
        except TimeoutError:
            self.telemetry.fallback("request_deadline", path=request.path)
            message = f"no answer within request_timeout ({self.settings.request_timeout:g} s)"
            started: web.StreamResponse | None = request.get(STREAM_KEY)
            if started is not None and started.prepared:
                return await end_stream_with_error(started, message, "upstream_timeout",
                                                   path=request.path)
            return route_error(request.path, 504, message, code="upstream_timeout")


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


GUARD_KEY: web.AppKey[Routes] = web.AppKey("guard", Routes)

# Container allocations, net of frees, between young-generation collections: CPython's
# 700 meant one collection per ~8 requests at c=50, each walking the parsed bodies of the
# requests in flight and promoting them until full collections ran (measured: 11% of
# the server's CPU; docs/performance.md, "The fast path's CPU, second pass").
YOUNG_GENERATION_THRESHOLD = 50_000
OLDER_GENERATION_THRESHOLDS = (20, 20)  # half as many older collections as the default 10


def settle_heap() -> None:
    """Set the heap built at start-up (modules, schemas, compiled validators) aside from
    the cyclic collector, which otherwise walks all of it on every full collection, and
    collect the young generation less often. Refcounting still frees nearly everything a
    request allocates the moment the request ends; only cycles wait for a collection."""
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, *OLDER_GENERATION_THRESHOLDS)


@web.middleware
async def openai_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return route_error(request.path, exc.status, exc.reason or "error", None)
    except Exception:
        request.app[GUARD_KEY].telemetry.log.exception("unhandled", path=request.path)
        started: web.StreamResponse | None = request.get(STREAM_KEY)
        if started is not None and started.prepared:
            # Headers are gone: a second response would corrupt the chunked body.
            return await end_stream_with_error(started, "internal error in reflexguard",
                                               path=request.path)
        return route_error(request.path, 500, "internal error in reflexguard; see its log")


def route_error(path: str, status: int, message: str,
                code: str | None = "internal") -> web.Response:
    """An error in the format of the route's dialect: Anthropic's on /v1/messages (an
    Anthropic SDK reads nothing else), OpenAI's everywhere else (Responses included)."""
    return web.Response(status=status, body=protocol_error_body(path, status, message, code),
                        content_type=JSON)


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
                            settings.upstream_connect_timeout, settings.upstream_max_connections,
                            settings.max_answer_bytes)
    telemetry = Telemetry(settings.events)
    if settings.inject_faults is not None:  # testing only, and never silently
        telemetry.log.warning("fault_injection_on", inject_faults=settings.inject_faults.text(),
                              note="TESTING ONLY: tool calls of upstream answers are damaged "
                                   "on purpose before validation")
    guard = Routes(settings, upstream, telemetry)
    guard.upstream_health = upstream.outcomes = UpstreamHealth(telemetry)
    # An abandoned upstream request is counted; its connection is closed (upstream.py).
    upstream.on_abandoned = lambda reason: telemetry.warning_fallback(
        "upstream_answer_too_large", limit=settings.max_answer_bytes) \
        if reason == "too_large" else telemetry.fallback("upstream_request_abandoned",
                                                         reason=reason)
    # auto_decompress off: bodies are decoded in `decoded_body`, bounded, with our errors.
    # handler_cancellation on whatever runs the app (serve, web.run_app, a test server;
    # aiohttp's default is off since 3.7): a client that hangs up cancels its handler,
    # and with it the upstream request, so the model stops generating for no one.
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[openai_errors],
                          handler_args={"auto_decompress": False,
                                        "handler_cancellation": True})
    app[UPSTREAM_KEY] = upstream
    app[GUARD_KEY] = guard
    tracing.instrument(app, upstream, settings)  # OpenTelemetry, when on

    thresholds = gc.get_threshold()

    async def start(_: web.Application) -> None:
        await upstream.start()
        settle_heap()

    async def stop(_: web.Application) -> None:
        await guard.sessions.close()  # drains the session writes still in flight
        await upstream.close()
        telemetry.close()
        gc.unfreeze()  # what was set aside at start may be collected again
        gc.set_threshold(*thresholds)

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/chat/completions", guard.chat_completions)
    app.router.add_post("/v1/messages", guard.messages)
    app.router.add_post("/v1/responses", guard.responses)
    app.router.add_get("/v1/models", guard.models)
    app.router.add_get("/healthz", guard.healthz)
    app.router.add_get("/livez", guard.livez)
    app.router.add_get("/readyz", guard.readyz)
    app.router.add_get("/metrics", guard.metrics)
    app.router.add_get("/reflexguard/sessions/{session}", guard.session)
    app.router.add_route("*", "/v1/{tail:.*}", guard.passthrough)
    return app
