"""Mapping faults to HTTP responses at the boundary, in OpenAI's error format."""

from __future__ import annotations

import orjson
from aiohttp import web

from reflexguard.errors import error_body
from reflexguard.limits import clip
from reflexguard.upstream import UpstreamFailure, UpstreamHTTPError

JSON = "application/json"


def json_error(status: int, message: str, param: str | None = None,
               code: str | None = None) -> web.Response:
    return web.Response(status=status, body=error_body(status, message, param, code),
                        content_type=JSON)


def _is_openai_error(body: bytes) -> bool:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and isinstance(value.get("error"), dict | str)


def upstream_error(exc: UpstreamFailure) -> web.Response:
    """Upstream 4xx/5xx JSON errors pass on as they are, anything else (an HTML page from
    a load balancer, an empty body) is wrapped in OpenAI's format with the same status;
    unreachable is 502, a timeout 504."""
    if isinstance(exc, UpstreamHTTPError):
        if _is_openai_error(exc.body):
            return web.Response(status=exc.status, body=exc.body, content_type=JSON)
        text = clip(exc.body.decode("utf-8", "replace").strip(), 200)
        what = repr(text) if text else "an empty body"
        return json_error(exc.status, f"upstream answered {exc.status} with {what}",
                          code="upstream_error")
    status = int(getattr(exc, "status", 502))
    code = "upstream_timeout" if status == 504 else "upstream_unavailable"
    return json_error(status, str(exc), code=code)
