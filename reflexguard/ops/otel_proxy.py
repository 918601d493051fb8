"""The proxy's OpenTelemetry edge: a SERVER span per request, a CLIENT span per upstream
request with its traceparent, and this process's providers flushed when the app stops.

This is an I/O edge, imported only with `otel` on (reflexguard.ops.tracing.instrument).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import yarl
from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from reflexguard.core.attempts import UpstreamFailure
from reflexguard.ops.otel import SCOPE, Instruments, OtelHooks, RequestTrace, current
from reflexguard.ops.otel_setup import Providers, process_providers
from reflexguard.ops.otel_spans import DirectTracer


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


def _error_type(exc: BaseException) -> str:
    return type(exc).__name__


def server_middleware(tools: Instruments) -> Any:
    @web.middleware
    async def server_span(request: web.Request, handler: Any) -> web.StreamResponse:
        parent = propagate.extract(request.headers)
        route = _route(request)
        span = tools.tracer.start_span(
            f"{request.method} {route}", context=parent, kind=SpanKind.SERVER,
            attributes={"http.request.method": request.method, "url.path": request.path,
                        "http.route": route, "url.scheme": request.scheme})
        state = RequestTrace(tools, trace.set_span_in_context(span, parent), span)
        token = current.set(state)
        attached = otel_context.attach(state.parent)  # type: ignore[arg-type]
        try:
            response: web.StreamResponse = await handler(request)
        except BaseException as exc:
            span.set_attribute("error.type", _error_type(exc))
            span.set_status(Status(StatusCode.ERROR, _error_type(exc)))
            raise
        else:
            span.set_attribute("http.response.status_code", response.status)
            overhead = response.headers.get("x-reflexguard-overhead-ms")
            if overhead is not None:
                span.set_attribute("reflexguard.overhead_ms", float(overhead))
            if response.status >= 500:
                span.set_attribute("error.type", str(response.status))
                span.set_status(Status(StatusCode.ERROR))
            return response
        finally:
            state.finish()
            span.end()
            otel_context.detach(attached)
            current.reset(token)

    return server_span


def _injected(headers: Mapping[str, str], span: Span | None,
              parent: otel_context.Context | None) -> dict[str, str]:
    carrier = dict(headers)
    ctx = trace.set_span_in_context(span, parent) if span is not None else parent
    propagate.inject(carrier, context=ctx)
    return carrier


def wrap_upstream(upstream: Any) -> None:
    """A CLIENT span around each request the upstream client sends for a guarded call,
    its traceparent in the request's headers; other requests carry the SERVER span's."""
    request_original = upstream.request
    stream_original = upstream.stream

    async def request(method: str, path: str, body: bytes | None,
                      headers: Mapping[str, str], deadline: float | None = None) -> Any:
        state = current.get()
        if state is None:
            return await request_original(method, path, body, headers, deadline)
        if state.call is None:
            return await request_original(method, path, body,
                                          _injected(headers, None, state.parent), deadline)
        span = state.start_upstream(_server(upstream), body)
        try:
            raw = await request_original(method, path, body,
                                         _injected(headers, span, state.parent), deadline)
        except BaseException as exc:
            state.upstream_done(_error_type(exc))
            raise
        state.upstream_done(str(raw.status) if raw.status >= 400 else None)
        return raw

    @asynccontextmanager
    async def stream(path: str, body: bytes, headers: Mapping[str, str]) -> AsyncIterator[Any]:
        state = current.get()
        if state is None or state.call is None:
            carried = headers if state is None else _injected(headers, None, state.parent)
            async with stream_original(path, body, carried) as response:
                yield response
            return
        span = state.start_upstream(_server(upstream), body)
        try:
            async with stream_original(path, body,
                                       _injected(headers, span, state.parent)) as response:
                yield response
        except BaseException as exc:
            status = getattr(exc, "status", None)
            state.upstream_done(str(status) if isinstance(status, int) else _error_type(exc))
            raise
        state.upstream_done()

    upstream.request = request
    upstream.stream = stream


_servers: dict[str, dict[str, Any]] = {}
SERVERS_KEPT = 64  # distinct upstream URLs remembered (the embedded model's change on restart)


def _server(upstream: Any) -> dict[str, Any]:
    """server.address and server.port of the upstream as it is now, parsed once per URL."""
    try:
        base = upstream.url("")
    except (UpstreamFailure, ValueError, TypeError):  # the embedded model is restarting
        return {}
    found = _servers.get(base)
    if found is None:
        try:
            url = yarl.URL(base)
            found = {"server.address": url.host or ""}
            if url.port is not None:
                found["server.port"] = url.port
        except (ValueError, TypeError):
            found = {}
        if len(_servers) >= SERVERS_KEPT:
            _servers.clear()
        _servers[base] = found
    return found


def _tracer(providers: Providers) -> Any:
    """The direct tracer (ops/otel_spans.py), unless the SDK is asked to count its own
    spans (OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED), which only its spans do, or gives
    no SDK tracer (OTEL_SDK_DISABLED): then the SDK's, a counted fallback."""
    reason = None
    if os.environ.get("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "").strip().lower() == "true":
        reason = "OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED"
    else:
        try:
            return DirectTracer(providers.tracer_provider, SCOPE)
        except TypeError as exc:
            reason = str(exc)
    providers.fallbacks("otel_sdk_spans", reason=reason)
    return providers.tracer_provider.get_tracer(SCOPE)


def proxy_hooks(app: web.Application, upstream: Any) -> OtelHooks:
    providers: Providers = process_providers()
    # The app's telemetry counts and logs our fallbacks. ops may not import http's key
    # for it (the layers), so it is found by what it holds.
    for value in app.values():
        telemetry = getattr(value, "telemetry", None)
        if telemetry is not None and hasattr(telemetry, "fallback"):
            providers.fallbacks.attach(telemetry.fallback)
            break
    tools = Instruments(_tracer(providers), None, providers.histograms)
    app.middlewares.insert(0, server_middleware(tools))
    wrap_upstream(upstream)

    async def flush(_: web.Application) -> None:
        providers.flush()

    app.on_cleanup.append(flush)
    return OtelHooks(tools)
