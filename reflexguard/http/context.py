"""What every request handler shares: settings, the upstream client, telemetry, the
compiled tool-set cache, the guard policy derived from the settings, and reading a
request's body (bounded in size and time, decoded).

This is an I/O edge only by what it holds; building it opens nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from reflexguard.core.bodies import decoded_body
from reflexguard.core.errors import BadRequest
from reflexguard.core.toolset import CompileNeeded, ToolSetCache
from reflexguard.http.connections import BodyTimeout, read_body_within
from reflexguard.http.upstream import Upstream
from reflexguard.ops.config import Settings
from reflexguard.ops.policy import grounding_policy, guard_policy, loop_policy
from reflexguard.ops.state import session_state
from reflexguard.ops.telemetry import Telemetry

# (HTTP status, body) for /healthz when something supervises the upstream (serve.py sets it
# for the embedded model: starting / ready / restarting / failed).
HealthCheck = Callable[[], tuple[int, dict[str, Any]]]


class GuardContext:
    """The state the handlers share: caches, policy, telemetry."""

    def __init__(self, settings: Settings, upstream: Upstream, telemetry: Telemetry) -> None:
        self.settings = settings
        self.upstream = upstream
        self.telemetry = telemetry
        self.health: HealthCheck | None = None
        # defer: a new tool set is compiled in a worker thread (compile_tools), never on
        # the loop; a cached one costs what it did (issue 18, docs/reliability.md).
        self.toolsets = ToolSetCache(max_schema_nodes=settings.max_schema_nodes, defer=True)
        self.grounding = grounding_policy(settings)
        self.policy = guard_policy(settings)
        self.loops = loop_policy(settings)  # the loop guard (core/loop_guard.py)
        # Sessions, in memory or on Redis (docs/scaling.md); telemetry records into them.
        self.sessions = session_state(settings.state, settings.session_ttl,
                                      settings.state_timeout, telemetry.fallback,
                                      lambda kind: telemetry.fallbacks.labels(kind).inc())
        telemetry.sessions = self.sessions

    async def compile_tools(self, miss: CompileNeeded) -> None:
        """Compile a tool set the cache has not seen in a worker thread, then keep it: the
        request that missed reads it next as a hit, with no await in between. Compiling
        is Python between short native calls, so the loop gets the GIL back at each
        switch interval (2,000 tools: ~0.4 s of compiling, docs/reliability.md)."""
        outcome = await asyncio.to_thread(self.toolsets.prepare, miss)
        self.toolsets.store(miss, outcome)

    async def _body(self, request: web.Request) -> bytes:
        try:
            if request.content.is_eof():  # all here already: no timer to arm
                raw = await request.read()
            else:
                raw = await read_body_within(request, self.settings.body_timeout)
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body exceeds {self.settings.max_body_bytes} bytes",
                             status=413, code="request_too_large") from None
        except BodyTimeout:
            self.telemetry.connection_refused("body_timeout")
            raise
        return decoded_body(raw, request.headers.get("Content-Encoding"),
                            self.settings.max_body_bytes)
