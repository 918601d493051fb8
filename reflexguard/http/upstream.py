"""The upstream client: a pooled aiohttp session and an error hierarchy for its faults.

This is an I/O edge. aiohttp was chosen over httpx by measurement (docs/performance.md):
under 50 concurrent requests on two cores httpx.AsyncClient's pool reached a p99 over a
second, while aiohttp stayed near 0.4 ms of CPU per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

import aiohttp
import orjson
import yarl

from reflexguard.core import json_text
from reflexguard.core.attempts import UpstreamFailure
from reflexguard.core.limits import (
    DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    depth_exceeds,
    nesting_could_exceed,
)
from reflexguard.core.model import JsonObject

__all__ = [
    "AnswerTooDeep", "AnswerTooLarge", "RawResponse", "RequestDeadline", "Upstream",
    "UpstreamFailure", "UpstreamHTTPError",
    "UpstreamProtocolError", "UpstreamTimeout", "UpstreamUnreachable", "parse_completion",
]

USER_AGENT = "reflexguard"
# The Anthropic ones matter for a native Messages upstream: its version and beta features
# (Claude Code sends several) are the client's choice, not ours.
FORWARDED_HEADERS = ("authorization", "openai-organization", "openai-project", "x-api-key",
                     "anthropic-version", "anthropic-beta")


class UpstreamUnreachable(UpstreamFailure):
    status = 502


class UpstreamTimeout(UpstreamFailure):
    status = 504


class RequestDeadline(UpstreamTimeout):
    """The request's own deadline (request_timeout) fell before the upstream answered."""


class UpstreamProtocolError(UpstreamFailure):
    """The upstream answered 2xx with something that is not a chat completion."""

    status = 502


class AnswerTooDeep(UpstreamProtocolError):
    """A chat completion nested deeper than reflexguard re-encodes: passed on unguarded."""


class AnswerTooLarge(UpstreamProtocolError):
    """An upstream answer (a body, or a guarded stream in total) past `max_answer_bytes`:
    a looping model or a broken server. Its request is closed and counted (issue 30)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"upstream answer exceeds max_answer_bytes ({limit} bytes)")
        self.limit = limit


class UpstreamHTTPError(UpstreamFailure):
    """The upstream answered 4xx or 5xx; its status and body are passed on as they are."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(f"upstream answered {status}")
        self.status = status
        self.body = body
        self.content_type = content_type


class Outcomes(Protocol):
    """Told every request's outcome (http/health.py: readiness and the unreachable log)."""

    def answered(self, status: int) -> None: ...

    def unreachable(self, url: str, error: BaseException) -> None: ...


class RawResponse:
    """An upstream answer read whole: its status, body and media type. The media type is
    read from the answer's headers only when asked: a guarded answer goes out as JSON of
    ours, and parsing the header on every request was a tenth of what this edge adds to
    it (issue 23)."""

    __slots__ = ("_content_type", "_headers_of", "body", "status")

    def __init__(self, status: int, body: bytes, content_type: str | None = None,
                 headers_of: aiohttp.ClientResponse | None = None) -> None:
        self.status = status
        self.body = body
        self._content_type = content_type
        self._headers_of = headers_of  # the answer whose Content-Type is read, when asked

    @property
    def content_type(self) -> str:
        """As aiohttp reads it: the media type without parameters, lower case,
        application/octet-stream when absent."""
        if self._content_type is None:
            self._content_type = (self._headers_of.content_type
                                  if self._headers_of is not None else "")
        return self._content_type


class Upstream:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        max_connections: int = 256,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        url = yarl.URL(base_url)
        self.max_answer_bytes = max_answer_bytes
        # Credentials in the URL become an explicit header: aiohttp refuses a URL with
        # user:password together with the Authorization header every SDK sends.
        self._url_auth = (aiohttp.encode_basic_auth(url.user or "", url.password or "")
                          if url.user is not None else None)
        base_url = str(url.with_user(None)) if url.user is not None else base_url
        self.base_url = base_url if base_url.rstrip("/").count("/") > 2 else base_url + "/v1"
        self._api_key = api_key
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self.outcomes: Outcomes | None = None  # set by build_app
        # Told ("cancelled", "timeout", "stopped") each time a request is given up before
        # its answer was read: build_app counts it (upstream_request_abandoned).
        self.on_abandoned: Callable[[str], None] | None = None

    def abandoned(self, response: aiohttp.ClientResponse | None, reason: str) -> None:
        """A request given up half-way: its connection is closed, never pooled half-read,
        so the model server sees the hang-up and stops generating."""
        if response is not None:
            response.close()
        if self.on_abandoned is not None:
            self.on_abandoned(reason)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, ttl_dns_cache=300, keepalive_timeout=30
        )
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, auto_decompress=True,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Upstream.start() was not awaited")
        return self._session

    def headers(self, incoming: Mapping[str, str]) -> dict[str, str]:
        # Our own User-Agent, set here: aiohttp's skip_auto_headers, which kept its default
        # out, copied the headers on every request (docs/performance.md, third pass).
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        for name in FORWARDED_HEADERS:
            value = incoming.get(name)
            if value is not None:
                headers[name] = value
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
            if "x-api-key" in headers:  # the agent's key must not reach an upstream we key
                headers["x-api-key"] = self._api_key
        elif self._url_auth:
            headers["authorization"] = self._url_auth
        return headers

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    async def request(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str],
        deadline: float | None = None,
    ) -> RawResponse:
        """Any request, its answer returned whatever the status. `deadline` (the event
        loop's clock) bounds it as the client's own timeout does: one timer, not two (an
        asyncio.timeout around it cost a tenth of the guarded fast path's CPU)."""
        options: dict[str, Any] = {}  # the session's timeout unless the deadline is nearer
        if deadline is not None:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise RequestDeadline("the request's deadline passed before it was sent")
            total = self._timeout.total
            if total is None or left < total:
                options["timeout"] = aiohttp.ClientTimeout(
                    total=left, sock_connect=self._timeout.sock_connect)
            else:
                deadline = None  # the upstream timeout falls first
        url = self.url(path)
        try:
            async with self.session.request(
                method, url, data=body, headers=headers, **options,
            ) as response:
                self._answered(response.status)
                try:
                    payload = await self._read_bounded(response)
                except BaseException:
                    response.close()
                    raise
                return RawResponse(response.status, payload, headers_of=response)
        except asyncio.CancelledError:
            # The client hung up (its handler is cancelled) or a deadline around us fell:
            # aiohttp closed the connection (a response half-read is closed above).
            self.abandoned(None, "cancelled")
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            self.abandoned(None, "timeout")
            if deadline is not None and isinstance(exc, TimeoutError) \
                    and not isinstance(exc, aiohttp.ServerTimeoutError):
                raise RequestDeadline("no answer before the request's deadline") from None
            raise UpstreamTimeout(f"upstream did not answer within the timeout: {exc}") from None
        except aiohttp.ClientError as exc:
            raise self._unreachable(url, exc) from None

    async def _read_bounded(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole body, up to `max_answer_bytes`; AnswerTooLarge past it (the request is
        closed and counted). A plain body of a known length is read in one call; a chunked
        or compressed one (a small body can inflate without bound) piece by piece."""
        limit = self.max_answer_bytes
        length = response.content_length
        if length is not None and length > limit:
            self.abandoned(response, "too_large")
            raise AnswerTooLarge(limit)
        if length is not None and "Content-Encoding" not in response.headers:
            return await response.read()  # aiohttp reads exactly Content-Length bytes
        pieces: list[bytes] = []
        size = 0
        async for piece in response.content.iter_any():
            size += len(piece)
            if size > limit:
                self.abandoned(response, "too_large")
                raise AnswerTooLarge(limit)
            pieces.append(piece)
        return b"".join(pieces)

    def _answered(self, status: int) -> None:
        if self.outcomes is not None:
            self.outcomes.answered(status)

    def _unreachable(self, url: str, exc: aiohttp.ClientError) -> UpstreamUnreachable:
        """The one place a connection failure becomes UpstreamUnreachable: it is counted
        and logged (rate-limited, the URL without credentials) by `outcomes`."""
        if self.outcomes is not None:
            self.outcomes.unreachable(url, exc)
        return UpstreamUnreachable(f"upstream unreachable: {type(exc).__name__}")

    async def probe(self, timeout: float) -> int:
        """GET /models within `timeout` seconds: its status (readiness, http/health.py)."""
        deadline = asyncio.get_running_loop().time() + timeout
        return (await self.request("GET", "models", None, self.headers({}), deadline)).status

    async def post_json(self, path: str, body: bytes, headers: Mapping[str, str],
                        deadline: float | None = None) -> RawResponse:
        """A POST whose non-2xx answer raises UpstreamHTTPError."""
        raw = await self.request("POST", path, body, headers, deadline)
        if raw.status >= 400:
            raise UpstreamHTTPError(raw.status, raw.body, raw.content_type)
        return raw

    async def completion(self, body: JsonObject, headers: Mapping[str, str],
                         max_depth: int = DEFAULT_MAX_JSON_DEPTH,
                         deadline: float | None = None) -> JsonObject:
        try:
            payload = orjson.dumps(body)
        except TypeError as exc:  # nested past orjson's 254 levels, or not JSON at all
            raise UpstreamProtocolError(f"re-ask body cannot be encoded: {exc}") from None
        raw = await self.post_json("chat/completions", payload, headers, deadline)
        return parse_completion(raw.body, max_depth)

    @asynccontextmanager
    async def stream(
        self, path: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streaming POST, open once its headers have arrived with a 2xx status."""
        url = self.url(path)
        try:
            response = await self.session.post(url, data=body, headers=headers)
        except asyncio.CancelledError:
            self.abandoned(None, "cancelled")
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout(f"upstream did not answer within the timeout: {exc}") from None
        except aiohttp.ClientError as exc:
            raise self._unreachable(url, exc) from None
        self._answered(response.status)
        try:
            if response.status >= 400:
                payload = await self._read_bounded(response)
                raise UpstreamHTTPError(response.status, payload, response.content_type)
            yield response
        except BaseException as exc:
            # The reader stopped half-way (its client hung up, a deadline fell, the answer
            # grew too large): the connection is closed, not returned to the pool with
            # the stream still coming.
            if not response.content.at_eof() and not response.closed:
                self.abandoned(response, "too_large" if isinstance(exc, AnswerTooLarge)
                               else "cancelled" if isinstance(
                                   exc, asyncio.CancelledError | ConnectionResetError)
                               else "stopped")
            raise
        finally:
            response.release()


def parse_completion(payload: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> JsonObject:
    try:
        # What orjson refuses and the agent's decoder reads (a lone surrogate, a 65-bit
        # integer) is still judged (core/json_text.py); the body is bounded already.
        value: Any = json_text.loads(payload)
    except ValueError:
        raise UpstreamProtocolError("upstream answered with a body that is not JSON") from None
    if not isinstance(value, dict):
        raise UpstreamProtocolError("upstream answered with JSON that is not an object")
    if nesting_could_exceed(payload, max_depth) and depth_exceeds(value, max_depth):
        raise AnswerTooDeep(f"upstream answer nests deeper than {max_depth} levels")
    return value
