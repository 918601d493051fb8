"""The proxy's upstream when it is the supervised embedded child.

This is an I/O edge. The child's URL changes on every restart (a new free port), so the
URL is read from the supervisor per request rather than fixed at start-up. While no child
is serving, and when a request fails because the child just died, the caller gets an
OpenAI-format 503 `upstream_unavailable` (responses.upstream_error maps the status), not
a 502 that would read as a bug in the model server.

Every chat completion sent to the child is first put into the form llama-cpp-python's
server accepts (dialects/llama_cpp.py: `content: null` on an assistant's tool-call turn,
content parts, `developer`, ...): here, and not for every upstream, because the rewrite
exists for that server's schema alone, and vLLM or OpenAI accept those bodies as they are.
Each kind of change is a counted fallback `llama_cpp_<kind>` naming where it changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

import aiohttp
import orjson

from reflexguard.core.limits import DEFAULT_MAX_ANSWER_BYTES
from reflexguard.dialects.llama_cpp import normalised
from reflexguard.embedded.supervisor import Supervisor
from reflexguard.http.upstream import RawResponse, Upstream, UpstreamFailure, UpstreamUnreachable
from reflexguard.ops.telemetry import Telemetry

PLACEHOLDER = "http://127.0.0.1:0/v1"  # never dialled: url() asks the supervisor
CHAT_PATH = "chat/completions"


class UpstreamUnavailable(UpstreamFailure):
    status = 503


class SupervisedUpstream(Upstream):
    def __init__(self, supervisor: Supervisor, api_key: str | None = None,
                 timeout: float = 600.0, connect_timeout: float = 10.0,
                 max_connections: int = 256,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> None:
        super().__init__(PLACEHOLDER, api_key, timeout, connect_timeout, max_connections,
                         max_answer_bytes)
        self.supervisor = supervisor
        self.telemetry: Telemetry | None = None  # counts the normalised fields; serve.py sets it

    def for_child(self, path: str, body: bytes | None) -> bytes | None:
        """A chat completion's body as the child's server accepts it (dialects/llama_cpp.py),
        its changes counted; any other body, or one that is not a JSON object, as it is."""
        if body is None or path.split("?", 1)[0].strip("/") != CHAT_PATH:
            return body
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
        if not isinstance(value, dict):
            return body
        fixed, changes = normalised(value)
        if not changes:
            return body
        try:
            encoded = orjson.dumps(fixed)
        except TypeError:  # deeper than orjson writes: sent as it came, the child decides
            return body
        if self.telemetry is not None:
            for kind, where in sorted(changes.items()):
                self.telemetry.fallback(f"llama_cpp_{kind}", at=where[:10], count=len(where))
        return encoded

    def url(self, path: str) -> str:
        child = self.supervisor.serving()
        if child is None:
            raise UpstreamUnavailable(self.supervisor.unavailable())
        return f"{child.base_url}/{path.lstrip('/')}"

    async def _explain(self, exc: UpstreamUnreachable) -> UpstreamFailure:
        if await self.supervisor.confirm_down():
            return UpstreamUnavailable(f"this request was cut off: "
                                       f"{self.supervisor.unavailable()}")
        return exc

    async def request(self, method: str, path: str, body: bytes | None,
                      headers: Mapping[str, str], deadline: float | None = None,
                      ) -> RawResponse:
        body = self.for_child(path, body) if method == "POST" else body
        try:
            return await super().request(method, path, body, headers, deadline)
        except UpstreamUnreachable as exc:
            raise await self._explain(exc) from None

    @asynccontextmanager
    async def stream(self, path: str, body: bytes,
                     headers: Mapping[str, str]) -> AsyncIterator[aiohttp.ClientResponse]:
        body = self.for_child(path, body) or body
        async with AsyncExitStack() as stack:
            try:
                response = await stack.enter_async_context(super().stream(path, body, headers))
            except UpstreamUnreachable as exc:
                raise await self._explain(exc) from None
            yield response
