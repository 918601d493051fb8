"""The HTTP edge: the aiohttp application, its routes and its error middleware.

Everything that decides lives in the core; this file reads requests, hands guarded ones
to `call` (one answer) or `streams` (a stream), and writes responses. Client mistakes
and upstream faults become OpenAI-format errors at this boundary, never tracebacks.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any, overload

from aiohttp import web

from reflexguard.core.bodies import UndecodableBody
from reflexguard.core.budget import BUDGET_HEADER
from reflexguard.core.errors import BadRequest
from reflexguard.core.limits import safe_label
from reflexguard.core.toolset import CompileNeeded
from reflexguard.dialects.chat_request import CHAT, ChatForm, ChatRequest
from reflexguard.dialects.messages import MESSAGES
from reflexguard.dialects.native import Dialect, DialectRequest
from reflexguard.dialects.reader import cleaned, read_request
from reflexguard.dialects.responses import RESPONSES
from reflexguard.http.call import GuardedCall
from reflexguard.http.client_stream import STREAM_KEY, end_stream_with_error
from reflexguard.http.dialect_call import (
    DialectCall,
    dialect_bad_request,
    dialect_upstream_error,
    session_of,
    translated_unguarded,
)
from reflexguard.http.dialect_stream import dialect_stream, translated_plain_stream
from reflexguard.http.faults import FAULT_SEED_HEADER
from reflexguard.http.health import UpstreamHealth
from reflexguard.http.health_routes import StatusRoutes
from reflexguard.http.passthrough import PassThroughRoutes, byte_stream
from reflexguard.http.responses import JSON, bad_request, route_error
from reflexguard.http.streams import guarded_stream
from reflexguard.http.upstream import Upstream, UpstreamFailure
from reflexguard.ops import tracing
from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import Telemetry

UPSTREAM_KEY: web.AppKey[Upstream] = web.AppKey("upstream", Upstream)


class Routes(PassThroughRoutes, StatusRoutes):
    """The request handlers, over the context they share: the guarded routes here, the
    pass-through ones (http/passthrough.py) and the health and admin ones
    (http/health_routes.py) as mixins."""

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            raw = await self._body(request)
            try:
                raw, chat = self._read(raw, CHAT)
            except CompileNeeded as miss:  # a new tool set: compiled off the loop (issue 18)
                await self.compile_tools(miss)
                raw, chat = self._read(raw, CHAT)
        except BadRequest as exc:
            return bad_request(exc)
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
                raw, parsed = self._read(raw, dialect)
            except CompileNeeded as miss:  # a new tool set: compiled off the loop (issue 18)
                await self.compile_tools(miss)
                raw, parsed = self._read(raw, dialect)
        except BadRequest as exc:
            response = dialect_bad_request(dialect, exc)
            if isinstance(exc, UndecodableBody):
                response.force_close()
            return response
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

    @overload
    def _read(self, raw: bytes, form: ChatForm) -> tuple[bytes, ChatRequest]: ...
    @overload
    def _read(self, raw: bytes, form: Dialect) -> tuple[bytes, DialectRequest]: ...
    def _read(self, raw: bytes, form: ChatForm | Dialect,
              ) -> tuple[bytes, ChatRequest | DialectRequest]:
        """The request in the client's bytes (dialects/reader.py), and the bytes to forward:
        the client's, or a copy with its history repaired, counted as history_repaired."""
        parsed = read_request(raw, form, self.toolsets, self.grounding,
                              self.settings.max_json_depth)
        # `parsed` is of `form`'s dialect, which the overloads cannot say of a union.
        forwarded, parsed, report = cleaned(raw, form, parsed)  # type: ignore[arg-type]
        if report is not None:
            self.telemetry.history_repaired(report.kinds, form.name, report.left_as_sent)
        return forwarded, parsed


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
