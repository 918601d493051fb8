"""The routes that report on reflexguard itself: /healthz, /livez, /readyz, /metrics and
/reflexguard/sessions/{session}, the admin routes behind `admin_token`. This is an I/O edge.

A mixin of the Routes (http/app.py); readiness is http/health.py's.
"""

from __future__ import annotations

import hmac
import time

from aiohttp import web

from reflexguard.core.limits import safe_label
from reflexguard.core.urls import redact
from reflexguard.http.context import GuardContext
from reflexguard.http.health import PROBE_TIMEOUT, UpstreamHealth
from reflexguard.http.responses import json_error


class StatusRoutes(GuardContext):
    """The health and admin handlers, over the context the routes share."""

    upstream_health: UpstreamHealth  # set by build_app

    async def healthz(self, _: web.Request) -> web.Response:
        body = {"status": "ok", "upstream": redact(self.upstream.base_url),
                "repair": self.settings.repair}
        body.update(self.faults_notice())
        if self.health is None:
            return web.json_response(body)
        status, supervised = self.health()
        return web.json_response({**body, **supervised}, status=status)

    def faults_notice(self) -> dict[str, str]:
        """Said on /healthz and /readyz while fault injection is on: never silently."""
        spec = self.settings.inject_faults
        return {} if spec is None else {"inject_faults": spec.text(),
                                        "warning": "fault injection is on (testing only)"}

    async def livez(self, _: web.Request) -> web.Response:
        """The process serves: nothing else is asked (an orchestrator's liveness probe)."""
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        """The upstream answered recently (http/health.py), or the embedded model is ready:
        200, else 503 with the reason."""
        if self.health is not None:  # the supervised embedded child
            status, supervised = self.health()
            body: dict[str, object] = {"status": "ready" if status == 200 else "not_ready",
                                       "upstream": supervised.get("upstream"),
                                       "embedded": supervised.get("status")}
            if status != 200:
                body["reason"] = supervised.get("reason")
            return web.json_response({**body, **self.faults_notice()}, status=status)
        outcome = await self.upstream_health.ready(
            lambda: self.upstream.probe(PROBE_TIMEOUT))
        body = {"status": "ready" if outcome.answered else "not_ready",
                "upstream": redact(self.upstream.base_url), "checked_by": outcome.source,
                "age_s": round(max(0.0, time.monotonic() - outcome.at), 3)}
        if not outcome.answered:
            body["reason"] = outcome.reason
        return web.json_response({**body, **self.faults_notice()},
                                 status=200 if outcome.answered else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        return web.Response(body=self.telemetry.metrics_text(),
                            headers={"Content-Type": "text/plain; version=0.0.4"})

    async def session(self, request: web.Request) -> web.Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        session = request.match_info["session"]
        record, source = await self.sessions.read(session)
        if record is None:
            response = json_error(404, f"no session recorded as {safe_label(session)!r}")
        else:
            response = web.json_response(record.model_dump())
        # Said in a header, not the body: the body is the same from every replica.
        response.headers["x-reflexguard-state"] = source
        return response

    def _denied(self, request: web.Request) -> web.Response | None:
        """The admin routes' bearer check, when `admin_token` is set."""
        token = self.settings.admin_token
        if token is None:
            return None
        given = request.headers.get("Authorization", "").encode("utf-8", "replace")
        expected = f"Bearer {token.get_secret_value()}".encode()
        if hmac.compare_digest(given, expected):
            return None
        return json_error(401, "this route needs 'Authorization: Bearer <admin_token>'",
                          code="unauthorized")
