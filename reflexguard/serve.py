"""Running the proxy process: the server, and the embedded upstream when there is none."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal

from aiohttp import web

from reflexguard.config import Settings
from reflexguard.server import GUARD_KEY, build_app
from reflexguard.telemetry import configure_logging


async def _serve(settings: Settings, upstream_url: str) -> None:
    app = build_app(settings, upstream_url)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, backlog=1024)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    # Long-lived objects (compiled schemas, the app) leave the collector's view, and young
    # collections run less often: measured 10-15% less CPU per request (docs/performance.md).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    log = app[GUARD_KEY].telemetry.log
    log.info("listening", host=settings.host, port=settings.port, upstream=upstream_url,
             repair=settings.repair)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(settings: Settings) -> int:
    from reflexguard.cli import CliError

    configure_logging(settings.log_level)
    if settings.upstream is None:
        raise CliError("--upstream is required (or REFLEXGUARD_UPSTREAM, or upstream: in a config)")
    try:
        asyncio.run(_serve(settings, settings.upstream))
    except OSError as exc:
        where = f"{settings.host}:{settings.port}"
        raise CliError(f"cannot listen on {where}: {exc.strerror}") from None
    return 0
