"""The routes reflexguard does not guard: any other /v1 route, /v1/models, a request
without tools and a native request passed on as it came, answered or streamed as the
upstream's bytes, within the request deadline. This is an I/O edge.

A mixin of the Routes (http/app.py): the guarded routes fall back to these when a request
offers no tools.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import orjson
from aiohttp import web

from reflexguard.core.errors import BadRequest
from reflexguard.core.urls import UnsafePath, passthrough_tail
from reflexguard.http.client_stream import (
    STREAM_KEY,
    ClientGone,
    ClientStream,
    end_stream_with_error,
    stream_error_end,
)
from reflexguard.http.context import GuardContext
from reflexguard.http.responses import JSON, bad_request, json_error, route_error, upstream_error
from reflexguard.http.sse import STREAM_FAULTS
from reflexguard.http.upstream import RequestDeadline, UpstreamFailure


class PassThroughRoutes(GuardContext):
    """The routes that pass a request on as it came, over the context they share."""

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


async def byte_stream(guard: GuardContext, request: web.Request, raw: bytes,
                      headers: dict[str, str],
                      path: str = "chat/completions") -> web.StreamResponse:
    """A stream reflexguard does not guard: the upstream's bytes, untouched."""
    try:
        async with guard.upstream.stream(path, raw, headers) as upstream:
            out = ClientStream(request, upstream.status, {
                "Content-Type": upstream.headers.get("Content-Type", "text/event-stream"),
                "Cache-Control": "no-cache"})
            tail = b"\n\n"  # the last bytes written: an error event must open its own event
            try:
                try:
                    async for data in upstream.content.iter_any():
                        await out.write(data)
                        tail = (tail + data)[-2:] if len(data) < 2 else data[-2:]
                except STREAM_FAULTS:
                    guard.telemetry.fallback("upstream_stream_cut", path=path)
                    if not out.started:
                        return json_error(502, "upstream stream was cut off",
                                          code="upstream_stream_error")
                    opening = b"" if tail == b"\n\n" else b"\n\n"
                    await out.write(opening + stream_error_end(path, "upstream stream was "
                                                                     "cut off"))
                return await out.end()
            except ClientGone:
                guard.telemetry.client_gone(path=path)
                return out.response
    except UpstreamFailure as exc:
        return upstream_error(exc)


def _wants_stream(body: bytes) -> bool:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True
