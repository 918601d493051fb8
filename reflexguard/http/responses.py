"""Mapping faults to HTTP responses at the boundary, in OpenAI's error format."""

from __future__ import annotations

import orjson
from aiohttp import web

from reflexguard.core.bodies import UndecodableBody
from reflexguard.core.errors import BadRequest, error_body
from reflexguard.core.limits import clip
from reflexguard.http.connections import protocol_error_body
from reflexguard.http.upstream import UpstreamFailure, UpstreamHTTPError

JSON = "application/json"


def json_error(status: int, message: str, param: str | None = None,
               code: str | None = None) -> web.Response:
    return web.Response(status=status, body=error_body(status, message, param, code),
                        content_type=JSON)


def _as_openai_error(body: bytes, status: int) -> bytes | None:
    """An upstream JSON error in OpenAI's four-key shape: its own bytes when it already
    is one, else its message (and type, param, code where given) re-wrapped."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, str):
        return error_body(status, clip(error, 2000), code="upstream_error")
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    if set(error) == {"message", "type", "param", "code"} and set(value) == {"error"}:
        return body
    wrapped = {"message": error["message"],
               "type": error.get("type") if isinstance(error.get("type"), str) else None,
               "param": error.get("param") if isinstance(error.get("param"), str) else None,
               "code": error.get("code") if isinstance(error.get("code"), str | int) else None}
    if wrapped["type"] is None:
        return error_body(status, wrapped["message"], wrapped["param"],
                          str(wrapped["code"]) if wrapped["code"] is not None else None)
    return orjson.dumps({"error": wrapped})


def upstream_error(exc: UpstreamFailure) -> web.Response:
    """Upstream 4xx/5xx JSON errors pass on as they are, anything else (an HTML page from
    a load balancer, an empty body) is wrapped in OpenAI's format with the same status;
    unreachable is 502, a timeout 504."""
    if isinstance(exc, UpstreamHTTPError):
        body = _as_openai_error(exc.body, exc.status)
        if body is not None:
            return web.Response(status=exc.status, body=body, content_type=JSON)
        text = clip(exc.body.decode("utf-8", "replace").strip(), 200)
        what = repr(text) if text else "an empty body"
        return json_error(exc.status, f"upstream answered {exc.status} with {what}",
                          code="upstream_error")
    status = int(getattr(exc, "status", 502))
    code = "upstream_timeout" if status == 504 else "upstream_unavailable"
    return json_error(status, str(exc), code=code)


def route_error(path: str, status: int, message: str,
                code: str | None = "internal") -> web.Response:
    """An error in the format of the route's dialect: Anthropic's on /v1/messages (an
    Anthropic SDK reads nothing else), OpenAI's everywhere else (Responses included)."""
    return web.Response(status=status, body=protocol_error_body(path, status, message, code),
                        content_type=JSON)


def bad_request(exc: BadRequest) -> web.Response:
    response = web.Response(status=exc.status, body=exc.body(), content_type=JSON)
    if isinstance(exc, UndecodableBody):
        # Where this body ends is unknown, so the connection cannot carry another request;
        # saying so lets clients reconnect instead of losing the requests queued behind.
        response.force_close()
    return response
