"""The fuzz suite's harness: reflexguard, a scripted fake upstream, a canary and a /healthz
prober, each on its own event loop in its own thread, plus a raw HTTP/1.1 client.

Separate loops are the point: the prober must time reflexguard's loop alone, so a
blocked proxy cannot also stall whoever measures it, and the fake's own work (rendering
megabytes of whitespace) is not charged to the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Coroutine, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import orjson
from aiohttp import web

from reflexguard.http.app import GUARD_KEY, build_app
from reflexguard.http.connections import GuardedRunner
from reflexguard.ops.config import Settings

T = TypeVar("T")
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", b"127.0.0.1", b"localhost"}


class LoopThread:
    """An event loop running forever in a daemon thread (daemon: a wedged proxy loop
    must not keep pytest from exiting)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# -- the fake upstream --------------------------------------------------------------------


@dataclass(frozen=True)
class Scene:
    """What the fake answers to one request. A streamed request gets `events` when set
    (each written as its own piece), anything else gets `body`."""

    status: int = 200
    content_type: str = "application/json"
    body: bytes = b""
    events: tuple[bytes, ...] | None = None
    delay: float = 0.0
    cut_after: int | None = None  # pieces written before the connection is dropped
    headers: tuple[tuple[str, str], ...] = ()

    def short(self) -> str:
        shown = self.body[:120] if self.events is None else b"".join(self.events)[:120]
        size = len(self.body) + sum(len(e) for e in self.events or ())
        return (f"Scene({self.status}, {self.content_type!r}, {shown!r}… {size} B, "
                f"stream={self.events is not None}, delay={self.delay}, cut={self.cut_after}, "
                f"headers={self.headers})")


@dataclass(frozen=True)
class Seen:
    method: str
    raw_path: str
    path: str
    query: str
    body: bytes


def wants_stream(body: bytes) -> bool:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True


class FakeUpstream:
    """Answers every method and path from `plan`, then from `default`."""

    def __init__(self, default: Scene) -> None:
        self.default = default
        self.plan: list[Scene] = []
        self.seen: list[Seen] = []
        self.sent_500 = False

    def begin(self, plan: Iterable[Scene]) -> None:
        self.plan = list(plan)
        self.seen = []
        self.sent_500 = False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.raw_path, request.path,
                              request.query_string, body))
        scene = self.plan.pop(0) if self.plan else self.default
        self.sent_500 = self.sent_500 or scene.status == 500
        if scene.delay:
            await asyncio.sleep(scene.delay)
        stream = wants_stream(body) and scene.events is not None
        if stream and scene.events is not None:
            pieces: tuple[bytes, ...] = scene.events
        else:
            half = len(scene.body) // 2
            pieces = (scene.body[:half], scene.body[half:])
        response = web.StreamResponse(status=scene.status, headers=dict(scene.headers))
        response.content_type = scene.content_type or "application/octet-stream"
        await response.prepare(request)
        try:
            for sent, piece in enumerate(pieces):
                if scene.cut_after is not None and sent >= scene.cut_after:
                    assert request.transport is not None
                    request.transport.close()  # drop the connection mid-body
                    return response
                if piece:
                    await response.write(piece)
            await response.write_eof()
        except ConnectionResetError:
            pass  # reflexguard hung up first (a deadline, a cut it noticed): its call
        return response

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app


class Canary:
    """A listener that nobody should ever connect to: fuzzed schemas point at it."""

    def __init__(self) -> None:
        self.hits: list[bytes] = []
        self.port = 0

    async def start(self) -> None:
        server = await asyncio.start_server(self._hit, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]

    async def _hit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(self.hits)
        self.hits.append(b"")  # counted on accept, whatever the peer sends
        with contextlib.suppress(TimeoutError, ConnectionError):
            self.hits[index] = await asyncio.wait_for(reader.read(300), 0.5)
        writer.close()


class ConnectAudit:
    """Every Python-level connect and name lookup the process makes, via an audit hook
    (covers aiohttp and anything else on Python sockets; the canary and a proxy variable
    cover what a native library would fetch)."""

    def __init__(self, allowed_ports: set[int]) -> None:
        self.allowed_ports = allowed_ports
        self.foreign: list[str] = []
        self.active = True
        sys.addaudithook(self._hook)  # hooks cannot be removed: `active` disarms it

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event == "socket.connect":
            address = args[1]
            if isinstance(address, tuple) and len(address) >= 2:
                if address[0] in LOOPBACK_HOSTS and address[1] in self.allowed_ports:
                    return
                self.foreign.append(f"connect {address!r}")
        elif event == "socket.getaddrinfo" and args[0] not in LOOPBACK_HOSTS:
            self.foreign.append(f"getaddrinfo {args[0]!r}")


# -- the /healthz prober --------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    start: float
    end: float
    ok: bool

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class Prober:
    url: str
    probes: list[Probe] = field(default_factory=list)
    inflight_since: float | None = None
    stopped: bool = False

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self.stopped:
                began = self.inflight_since = time.perf_counter()
                try:
                    async with session.get(self.url) as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                self.probes.append(Probe(began, time.perf_counter(), ok))
                self.inflight_since = None
                await asyncio.sleep(0.005)

    def worst_during(self, start: float, end: float) -> float:
        """The longest /healthz wait inside [start, end], counting one still in flight;
        a probe sent before `start` counts from `start` (what delayed it earlier is not
        this case's doing)."""
        worst = 0.0
        for probe in reversed(self.probes):
            if probe.end < start:
                break
            if probe.start <= end:
                worst = max(worst, probe.end - max(probe.start, start))
        since = self.inflight_since
        if since is not None and since <= end:
            worst = max(worst, time.perf_counter() - max(since, start))
        return worst


# -- a raw HTTP/1.1 client ------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    status: int
    headers: dict[str, str]
    body: bytes
    fault: str | None  # the response was not one complete, well-framed HTTP response
    seconds: float


def http_request(method: str, target: str, headers: Iterable[tuple[bytes, bytes]],
                 body: bytes) -> bytes:
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: 127.0.0.1",
             b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _dechunk(data: bytes) -> tuple[bytes, str | None]:
    body = bytearray()
    position = 0
    while True:
        line_end = data.find(b"\r\n", position)
        if line_end < 0:
            return bytes(body), "chunked body ends without its last chunk"
        try:
            size = int(data[position:line_end].split(b";")[0], 16)
        except ValueError:
            return bytes(body), f"bad chunk size line {data[position:line_end][:80]!r}"
        start = line_end + 2
        if size == 0:
            rest = data[start:]
            if rest not in (b"\r\n", b""):
                return bytes(body), f"bytes after the last chunk: {rest[:120]!r}"
            return bytes(body), None
        if len(data) < start + size + 2:
            return bytes(body + data[start:]), "chunked body cut off inside a chunk"
        body += data[start:start + size]
        position = start + size + 2


def parse_response(data: bytes, method: str) -> tuple[int, dict[str, str], bytes, str | None]:
    head, separator, rest = data.partition(b"\r\n\r\n")
    if not separator:
        return 0, {}, b"", f"no complete response head ({len(data)} bytes: {data[:120]!r})"
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ")[1])
    except (IndexError, ValueError):
        return 0, {}, b"", f"bad status line {lines[0][:120]!r}"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if method == "HEAD" or status in (204, 304):
        return status, headers, b"", None
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body, fault = _dechunk(rest)
        return status, headers, body, fault
    if "content-length" in headers:
        length = int(headers["content-length"])
        if len(rest) < length:
            return status, headers, rest, f"body has {len(rest)} of {length} bytes"
        if len(rest) > length:
            return status, headers, rest[:length], f"bytes after the body: {rest[length:][:120]!r}"
        return status, headers, rest, None
    return status, headers, rest, None


async def exchange(port: int, request: bytes, method: str, timeout: float) -> Exchange:
    """One request on a fresh connection, read to EOF; transport trouble is a `fault`."""
    began = time.perf_counter()
    data = b""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    except (OSError, TimeoutError) as exc:
        return Exchange(0, {}, b"", f"cannot connect: {exc!r}", 0.0)
    try:
        try:
            writer.write(request)
            await writer.drain()
        except ConnectionError:
            pass  # the server may answer (413) before reading all we send; read it
        data = await asyncio.wait_for(reader.read(), timeout)
    except TimeoutError:
        return Exchange(0, {}, data, f"no complete answer within {timeout} s",
                        time.perf_counter() - began)
    except ConnectionError as exc:
        return Exchange(0, {}, data, f"connection error: {exc!r}", time.perf_counter() - began)
    finally:
        writer.close()
    status, headers, body, fault = parse_response(data, method)
    return Exchange(status, headers, body, fault, time.perf_counter() - began)


async def exchange_slowly(port: int, request: bytes, method: str, timeout: float,
                          pieces: int, gap: float) -> Exchange:
    """As `exchange`, the request written in `pieces` pieces `gap` seconds apart; a server
    that answers (a 408) or closes before the last piece is read, not a fault."""
    began = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    except (OSError, TimeoutError) as exc:
        return Exchange(0, {}, b"", f"cannot connect: {exc!r}", 0.0)
    size = max(1, -(-len(request) // pieces))
    data = b""
    try:
        try:
            for at in range(0, len(request), size):
                writer.write(request[at:at + size])
                await writer.drain()
                if at + size < len(request):
                    await asyncio.sleep(gap)
                    if reader.at_eof() or writer.is_closing():
                        break
        except ConnectionError:
            pass  # the server stopped reading (a timeout's answer): read what it said
        data = await asyncio.wait_for(reader.read(), timeout)
    except TimeoutError:
        return Exchange(0, {}, data, f"no complete answer within {timeout} s",
                        time.perf_counter() - began)
    except ConnectionError as exc:
        if not data:
            return Exchange(0, {}, b"", None, time.perf_counter() - began)  # closed, silent
        return Exchange(0, {}, data, f"connection error: {exc!r}", time.perf_counter() - began)
    finally:
        writer.close()
    if not data:  # closed without a word: the head timeout on an empty head
        return Exchange(0, {}, b"", None, time.perf_counter() - began)
    status, headers, body, fault = parse_response(data, method)
    return Exchange(status, headers, body, fault, time.perf_counter() - began)


async def _trickle(port: int, count: int, head: bytes) -> None:
    writers: list[asyncio.StreamWriter] = []
    try:
        for _ in range(count):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            writer.write(head)
            writers.append(writer)
        while writers:
            await asyncio.sleep(1.0)
            for writer in list(writers):
                if writer.is_closing():
                    writers.remove(writer)
                    continue
                try:
                    writer.write(b"a")
                except (ConnectionError, RuntimeError):
                    writers.remove(writer)
    finally:
        for writer in writers:
            writer.close()


# -- the whole set-up -----------------------------------------------------------------------


class Harness:
    """reflexguard in several settings profiles, with the fake, canary and prober around."""

    def __init__(self, default_scene: Scene) -> None:
        self.proxy = LoopThread("fuzz-proxy")
        self.aux = LoopThread("fuzz-upstream")
        self.client = LoopThread("fuzz-client")
        self.probe_loop = LoopThread("fuzz-prober")
        self.fake = FakeUpstream(default_scene)
        self.canary = Canary()
        self.runners: list[tuple[LoopThread, web.AppRunner]] = []
        self.ports: dict[str, int] = {}
        self.upstream_port = self.aux.run(self._serve(self.fake.app(), self.aux))
        self.aux.run(self.canary.start())
        self.prober: Prober | None = None
        self._probing: Future[None] | None = None
        self.audit: ConnectAudit | None = None
        self.dead: str | None = None  # set once the proxy stopped answering at all
        self.cases = 0
        self.worst_in_flight = 0.0  # the longest /healthz wait seen while a case ran

    async def _serve(self, app: web.Application, where: LoopThread,
                     settings: Settings | None = None) -> int:
        """`app` on a free loopback port; a proxy (with `settings`) through the runner that
        `reflexguard serve` uses, so its connection bounds and protocol errors are fuzzed."""
        runner: web.AppRunner
        if settings is not None:
            runner = GuardedRunner(app, settings, app[GUARD_KEY].telemetry,
                                   handle_signals=False, access_log=None)
        else:
            runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.runners.append((where, runner))
        server = site._server
        assert server is not None
        return int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    def add_proxy(self, name: str, settings: Settings) -> None:
        async def start() -> int:
            return await self._serve(build_app(settings), self.proxy, settings)

        self.ports[name] = self.proxy.run(start())

    def start_watching(self, probe_profile: str) -> None:
        self.prober = Prober(f"http://127.0.0.1:{self.ports[probe_profile]}/healthz")
        self._probing = asyncio.run_coroutine_threadsafe(self.prober.run(), self.probe_loop.loop)
        self.audit = ConnectAudit({self.upstream_port, *self.ports.values()})

    def send(self, profile: str, request: bytes, method: str, timeout: float,
             pieces: int = 1, gap: float = 0.0) -> Exchange:
        """One request; with `pieces` > 1, written in that many pieces `gap` seconds apart
        (a slow client)."""
        if pieces > 1:
            return self.client.run(
                exchange_slowly(self.ports[profile], request, method, timeout, pieces, gap),
                timeout + pieces * gap + 10)
        return self.client.run(exchange(self.ports[profile], request, method, timeout),
                               timeout + 10)

    def hold_slow_connections(self, profile: str, count: int, head: bytes) -> Future[None]:
        """`count` connections to `profile`, each sent `head` (an unfinished request) and
        then a byte a second until the server closes them or the future is cancelled."""
        return asyncio.run_coroutine_threadsafe(
            _trickle(self.ports[profile], count, head), self.client.loop)

    def close(self) -> None:
        if self.audit is not None:
            self.audit.active = False
        if self.prober is not None:
            self.prober.stopped = True
            if self._probing is not None:
                with contextlib.suppress(Exception):
                    self._probing.result(5)
        for where, runner in reversed(self.runners):
            if self.dead is None or where is not self.proxy:
                where.run(runner.cleanup())
        for thread in (self.probe_loop, self.client, self.aux, self.proxy):
            thread.stop()
