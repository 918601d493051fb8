"""The proxy's upstream when it is the supervised embedded child.

This is an I/O edge. The child's URL changes on every restart (a new free port), so the
URL is read from the supervisor per request rather than fixed at start-up. While no child
is serving, and when a request fails because the child just died, the caller gets an
OpenAI-format 503 `upstream_unavailable` (responses.upstream_error maps the status), not
a 502 that would read as a bug in the model server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

import aiohttp

from reflexguard.embedded.supervisor import Supervisor
from reflexguard.http.upstream import RawResponse, Upstream, UpstreamFailure, UpstreamUnreachable

PLACEHOLDER = "http://127.0.0.1:0/v1"  # never dialled: url() asks the supervisor


class UpstreamUnavailable(UpstreamFailure):
    status = 503


class SupervisedUpstream(Upstream):
    def __init__(self, supervisor: Supervisor, api_key: str | None = None,
                 timeout: float = 600.0, connect_timeout: float = 10.0,
                 max_connections: int = 256) -> None:
        super().__init__(PLACEHOLDER, api_key, timeout, connect_timeout, max_connections)
        self.supervisor = supervisor

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
        try:
            return await super().request(method, path, body, headers, deadline)
        except UpstreamUnreachable as exc:
            raise await self._explain(exc) from None

    @asynccontextmanager
    async def stream(self, path: str, body: bytes,
                     headers: Mapping[str, str]) -> AsyncIterator[aiohttp.ClientResponse]:
        async with AsyncExitStack() as stack:
            try:
                response = await stack.enter_async_context(super().stream(path, body, headers))
            except UpstreamUnreachable as exc:
                raise await self._explain(exc) from None
            yield response
