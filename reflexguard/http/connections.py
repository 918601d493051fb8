"""The connection edge: read timeouts, a connection cap, and aiohttp's own protocol errors
in the route's error format. This is an I/O edge.

aiohttp's server has no header read timeout (its keep-alive timer starts only after a
first response), no cap on connections, and answers what its parser refuses (CL+TE, a
repeated Content-Length, too many or too long headers, `Expect: 999-x`) with text/plain
before any handler or middleware runs (issue 18). Three pieces close that, over aiohttp's
own classes:

    GuardedRunner (web.AppRunner)   builds a GuardedServer instead of aiohttp's Server
    └── GuardedServer (web.Server)  counts connections, makes GuardedHandlers
        └── GuardedHandler (RequestHandler)
              header_timeout        from a connection's first byte (or its opening) to a
                                    complete request head: 408 and closed
              connection cap        past it, the oldest connection still waiting for a
                                    head is shed; if none, the new one gets a 503
              handle_error          every protocol error as OpenAI JSON (Anthropic's on
                                    /v1/messages), never text/plain

The body read timeout is the handler's (`Routes._body`, http/app.py): only the handler
knows a body is being waited for. Every refusal is counted
(`reflexguard_connections_refused{reason}`) and logged, rate-limited.

The cap leaves file descriptors for what a request needs besides its socket (the upstream
pool, logs, the events file): with RLIMIT_NOFILE at 1,024 and 1,100 connections each
trickling a header byte, /healthz still answers.
"""

from __future__ import annotations

import asyncio
import resource
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from reflexguard.core.bodies import UndecodableBody
from reflexguard.core.errors import error_body
from reflexguard.core.limits import clip
from reflexguard.dialects.messages import MESSAGES
from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import Telemetry

# Descriptors kept back from the cap besides the upstream pool: the listening sockets, the
# log and events files, a supervised child's pipes, DNS, a Redis pool.
FD_RESERVE = 64
MIN_CONNECTIONS = 8
REFUSED_LINGER = 1.0  # seconds a refused connection may take to read its 503


class BodyTimeout(UndecodableBody):
    """A body that did not arrive within `body_timeout`: answered 408, and (as for any
    body whose end is unknown) the connection closed after the answer."""


async def read_body_within(request: web.Request, seconds: float) -> bytes:
    try:
        async with asyncio.timeout(seconds):
            return await request.read()
    except TimeoutError:
        raise BodyTimeout(f"request body not received within {seconds:g} s", status=408,
                          code="request_timeout") from None


ANSWER_SLACK = 30.0  # seconds past the bounds for scheduling on a loaded machine


def answer_bound(settings: Settings) -> float:
    """Seconds within which reflexguard answers any request it has accepted: its head and
    body read timeouts, then `request_timeout` (every attempt, repairs included), plus
    slack. A client that waits less fails for a limit shorter than the proxy's own (issue
    18: a real-model test hit aiohttp's default 5 minutes under load)."""
    return settings.header_timeout + settings.body_timeout + settings.request_timeout \
        + ANSWER_SLACK


def raise_file_limit() -> int:
    """The soft RLIMIT_NOFILE raised to the hard one (a server's usual first step), and
    returned; unchanged where the system refuses."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft
    return hard


def connection_cap(settings: Settings) -> int:
    """`max_client_connections`, never above what the file limit leaves after the upstream
    pool and a reserve (a cap past the file limit would fail at accept(), where nothing is
    counted and /healthz cannot be answered)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = (1 << 20 if soft == resource.RLIM_INFINITY else soft) \
        - settings.upstream_max_connections - FD_RESERVE
    wanted = settings.max_client_connections or room
    return max(MIN_CONNECTIONS, min(wanted, room))


def raw_response(status: int, body: bytes) -> bytes:
    """A whole HTTP/1.1 response that closes its connection, for where no request exists."""
    phrase = HTTPStatus(status).phrase
    return (f"HTTP/1.1 {status} {phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def protocol_error_body(path: str, status: int, message: str, code: str | None) -> bytes:
    """The route's own error format: Anthropic's on /v1/messages, OpenAI's elsewhere (a
    request whose head did not parse has no route: OpenAI's)."""
    if path.startswith("/v1/messages"):
        return MESSAGES.error_body(status, message, None, code)
    return error_body(status, message, None, code)


class GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol, with a head timeout, the cap's bookkeeping and
    JSON protocol errors."""

    def __init__(self, manager: GuardedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = manager
        self.awaiting_head = True
        self.head_bytes = 0
        self.head_timer: asyncio.TimerHandle | None = None
        self.head_deadline: float | None = None  # the loop's time the head must be in by
        self.refused = False
        self.last_body: Any = None  # the last request's body stream (a StreamReader)

    # -- the head timeout ---------------------------------------------------------------

    # One timer per connection, left running between requests: a head that arrives in
    # time only clears `head_deadline`, and the timer, when it fires, re-arms itself for a
    # later deadline or ends. A timer made and cancelled on every request cost more of the
    # fast path's CPU than the rest of this class (issue 23: each one was a heap push of
    # several Python-level comparisons, a cancel, and the loop's sweep of cancelled ones).

    def _arm(self) -> None:
        if self.head_deadline is None:
            self.head_deadline = self._loop.time() + self.guard.header_timeout
        if self.head_timer is None:
            self.head_timer = self._loop.call_at(self.head_deadline, self._head_timed_out)

    def _disarm(self) -> None:
        self.head_deadline = None

    def _stop_timer(self) -> None:
        self.head_deadline = None
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_timed_out(self) -> None:
        fired_for = self.head_timer.when() if self.head_timer is not None else 0.0
        self.head_timer = None
        deadline = self.head_deadline
        if deadline is None:
            return  # the head came in time; the next one arms again
        if deadline > fired_for:  # a later head's deadline (the loop's time can read a
            # hair before `fired_for` here: the loop runs timers due within its clock's
            # resolution, so the deadlines are compared, not the clock)
            self.head_timer = self._loop.call_at(deadline, self._head_timed_out)
            return
        self.head_deadline = None
        if not self.awaiting_head or self.transport is None or self._closing():
            return
        self.guard.telemetry.connection_refused("header_timeout")
        if self.head_bytes:  # a request began: say why it ends
            message = f"request headers not received within {self.guard.header_timeout:g} s"
            self.transport.write(raw_response(408, error_body(408, message, None,
                                                              "request_timeout")))
        self.guard.waiting.pop(self, None)
        self.force_close()

    def _closing(self) -> bool:
        return self._force_close or self._close

    def _waits_for_head(self) -> None:
        if self._closing() or self._messages:  # no next head, or one already here
            return
        self.awaiting_head = True
        self.head_bytes = 0
        self.guard.waiting[self] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.guard.opened += 1
        if not self.guard.admit(self):
            self._refuse()
            return
        self._waits_for_head()
        self._arm()  # a connection that sends nothing holds a descriptor too

    def _refuse(self) -> None:
        self.refused = True
        self.awaiting_head = False
        transport = self.transport
        if transport is None:
            return
        message = (f"reflexguard is at its cap of {self.guard.cap} concurrent connections; "
                   "retry shortly")
        transport.write(raw_response(503, error_body(503, message, None,
                                                     "too_many_connections")))
        # Read what the client sends until it closes or the linger ends: closing at once
        # could reset the connection before the client has read the 503.
        self._loop.call_later(REFUSED_LINGER, transport.close)
        if transport.can_write_eof():
            transport.write_eof()

    def data_received(self, data: bytes) -> None:
        if self.refused or self._closing():
            return  # aiohttp drops these too: nothing more is read on this connection
        if self.awaiting_head and (self.last_body is None or self.last_body.is_eof()):
            # (bytes of a body aiohttp reads and drops after an early answer are no head)
            self.head_bytes += len(data)
            self._arm()
        super().data_received(data)
        if self.awaiting_head and self._messages:  # a head parsed (or refused by the parser)
            self.awaiting_head = False
            self.guard.waiting.pop(self, None)
            self._disarm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_timer()  # nothing keeps a closed connection's handler alive
        self.guard.waiting.pop(self, None)
        self.guard.opened -= 1
        super().connection_lost(exc)

    async def finish_response(self, request: Any, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        if isinstance(resp, web.HTTPException) and resp.status >= 400:
            # Raised outside the middleware (the Expect handler runs before it): said in
            # JSON like every other error.
            resp = self._json_error(request, resp.status, resp.reason or "error", "http_error",
                                    resp.keep_alive)
        result = await super().finish_response(request, resp, start_time)
        self.last_body = request.content
        self._waits_for_head()
        return result

    # -- protocol errors ---------------------------------------------------------------

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """aiohttp's own, logged as it logs them, answered in JSON instead of text."""
        super().handle_error(request, status, exc, message)  # logs; raises once bytes are out
        if status >= 500:
            text, code = "internal error in reflexguard; see its log", "internal"
        else:
            text = clip(message or HTTPStatus(status).phrase, 300)
            code = "bad_http_request"
        self.guard.telemetry.fallback("protocol_error", status=status, code=code)
        return self._json_error(request, status, text, code, keep_alive=False)

    @staticmethod
    def _json_error(request: Any, status: int, message: str, code: str,
                    keep_alive: bool | None) -> web.Response:
        path = str(getattr(request, "path", "") or "")
        response = web.Response(status=status, content_type="application/json",
                                body=protocol_error_body(path, status, message, code))
        if not keep_alive:
            response.force_close()
        return response


class GuardedServer(web.Server):
    """aiohttp's Server, counting its connections and making GuardedHandlers."""

    def __init__(self, plain: web.Server, settings: Settings, telemetry: Telemetry,
                 **kwargs: Any) -> None:
        # Built from the app's own Server so every handler argument it carries is kept.
        super().__init__(plain.request_handler, request_factory=plain.request_factory,
                         handler_cancellation=plain.handler_cancellation,
                         loop=asyncio.get_running_loop(), **kwargs)
        self.telemetry = telemetry
        self.header_timeout = settings.header_timeout
        self.cap = connection_cap(settings)
        self.opened = 0
        # Connections waiting for a request head (new, between requests, or slow), oldest
        # first: the ones shed when the cap is reached.
        self.waiting: dict[GuardedHandler, None] = {}

    def admit(self, handler: GuardedHandler) -> bool:
        if self.opened <= self.cap:
            return True
        for oldest in self.waiting:
            self.waiting.pop(oldest)
            self.telemetry.connection_refused("shed_waiting", cap=self.cap)
            oldest.force_close()
            return True
        self.telemetry.connection_refused("cap", cap=self.cap)
        return False

    def __call__(self) -> GuardedHandler:
        return GuardedHandler(self, loop=self._loop, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """web.AppRunner serving through a GuardedServer, with the settings' keep-alive."""

    def __init__(self, app: web.Application, settings: Settings, telemetry: Telemetry,
                 **kwargs: Any) -> None:
        kwargs.setdefault("keepalive_timeout", settings.keepalive_timeout)
        super().__init__(app, **kwargs)
        self.settings = settings
        self.telemetry = telemetry

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        # _kwargs: the handler arguments aiohttp gathered (the app's handler_args, the
        # runner's keep-alive and access log); aiohttp 3.14's Server keeps them there.
        return GuardedServer(plain, self.settings, self.telemetry, **plain._kwargs)
