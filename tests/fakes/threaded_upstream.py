"""The scripted fake upstream on a real loopback socket, served from a background thread,
so that synchronous clients (and other processes) can call it while the test blocks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from tests.fakes.fake_upstream import FakeUpstream


@contextmanager
def threaded_fake(upstream: FakeUpstream | None = None) -> Iterator[tuple[FakeUpstream, str]]:
    """(the fake, its base URL ending in /v1), served until the block ends."""
    fake = upstream or FakeUpstream()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, object] = {}

    async def start() -> None:
        runner = web.AppRunner(fake.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        holder["runner"] = runner
        holder["port"] = server.sockets[0].getsockname()[1]
        ready.set()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=serve, name="fake-upstream", daemon=True)
    thread.start()
    assert ready.wait(10), "fake upstream did not start"
    try:
        yield fake, f"http://127.0.0.1:{holder['port']}/v1"
    finally:
        runner = holder["runner"]
        assert isinstance(runner, web.AppRunner)
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
