"""reflexguard running in a background thread, for the synchronous tau2 runner."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from aiohttp import web

from reflexguard.http.app import build_app
from reflexguard.ops.config import Settings
from reflexguard.ops.loopback import free_port

SHUTDOWN_GRACE_S = 2.0


class ProxyHost:
    """`with ProxyHost(settings) as url:` serves reflexguard on loopback until the block ends."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings.model_copy(update={"port": free_port(), "host": "127.0.0.1"})
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="reflexguard", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}/v1"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the caller in __enter__
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # A request still in flight when the block ends belongs to an abandoned episode
        # (Ctrl-C, SIGTERM): waiting aiohttp's default 60 s for it would only delay
        # stopping the model server.
        runner = web.AppRunner(build_app(self.settings), access_log=None,
                               shutdown_timeout=SHUTDOWN_GRACE_S)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.settings.port).start()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def __enter__(self) -> str:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError(f"reflexguard did not start: {self._error}")
        return self.url

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
