"""Mapping faults to HTTP responses at the boundary, in OpenAI's error format."""

from __future__ import annotations

from aiohttp import web

from reflexguard.errors import error_body
from reflexguard.upstream import UpstreamFailure, UpstreamHTTPError

JSON = "application/json"


def json_error(status: int, message: str, param: str | None = None,
               code: str | None = None) -> web.Response:
    return web.Response(status=status, body=error_body(status, message, param, code),
                        content_type=JSON)


def upstream_error(exc: UpstreamFailure) -> web.Response:
    """Upstream 4xx/5xx pass on as they are; unreachable is 502, a timeout 504."""
    if isinstance(exc, UpstreamHTTPError):
        return web.Response(status=exc.status, body=exc.body,
                            headers={"Content-Type": exc.content_type or JSON})
    status = int(getattr(exc, "status", 502))
    code = "upstream_timeout" if status == 504 else "upstream_unavailable"
    return json_error(status, str(exc), code=code)
