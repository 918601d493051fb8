"""A recording pass-through: sits between reflexguard and a real upstream and keeps every
request body and raw answer, so that what the proxy counted can be checked independently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web


@dataclass
class Exchange:
    request: dict[str, Any]
    status: int
    answer: bytes


@dataclass
class Tap:
    target: str  # the upstream's base URL, ending in /v1
    exchanges: list[Exchange] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None

    async def forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        path = request.match_info["tail"]
        async with self._session.request(request.method, f"{self.target}/{path}",
                                         data=body or None,
                                         headers={"Content-Type": "application/json"}) as answer:
            payload = await answer.read()
            if request.method == "POST" and path == "chat/completions":
                self.exchanges.append(Exchange(orjson.loads(body), answer.status, payload))
            return web.Response(status=answer.status, body=payload,
                                content_type=answer.content_type)

    def app(self) -> web.Application:
        app = web.Application()

        async def start(_: web.Application) -> None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))

        async def stop(_: web.Application) -> None:
            if self._session is not None:
                await self._session.close()

        app.on_startup.append(start)
        app.on_cleanup.append(stop)
        app.router.add_route("*", "/v1/{tail:.*}", self.forward)
        return app
