"""Running the proxy process: the server, and the supervised embedded upstream when there is none.

This is an I/O edge. With the embedded model the server listens at once: /healthz says
`starting` (503) until the child has loaded the model and decoded a token, then `ready`;
requests meanwhile get an OpenAI-format 503 `upstream_unavailable` (embedded/supervisor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import signal
import sys
from collections.abc import Callable

from aiohttp import web

from reflexguard.cli.errors import CliError
from reflexguard.core.urls import upstream_base
from reflexguard.embedded import model_store
from reflexguard.embedded.child import ChildFailed, check_runtime, launch
from reflexguard.embedded.supervised import SupervisedUpstream
from reflexguard.embedded.supervisor import Supervisor
from reflexguard.http.app import GUARD_KEY, build_app
from reflexguard.http.connections import GuardedRunner, raise_file_limit
from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import configure_logging


def supervised_app(settings: Settings, supervisor: Supervisor) -> web.Application:
    """reflexguard in front of a supervised child: the child starts with the app, stops
    after the last in-flight request (on_cleanup), and /healthz reports its state."""
    key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
    upstream = SupervisedUpstream(supervisor, key, settings.upstream_timeout,
                                  settings.upstream_connect_timeout,
                                  settings.upstream_max_connections,
                                  settings.max_answer_bytes)
    app = build_app(settings, upstream=upstream)
    guard = app[GUARD_KEY]
    upstream.telemetry = guard.telemetry  # the normalised request fields are counted there
    guard.health = supervisor.health

    async def start(_: web.Application) -> None:
        supervisor.start(guard.telemetry)

    async def stop(_: web.Application) -> None:
        await supervisor.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


AIOHTTP_SHUTDOWN_TIMEOUT = 60.0  # aiohttp's own default: the single process keeps it


async def run_server(settings: Settings, app: web.Application, upstream: str | None, *,
                 reuse_port: bool = False, shutdown_timeout: float = AIOHTTP_SHUTDOWN_TIMEOUT,
                 on_listening: Callable[[], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then drain: stop accepting, let in-flight requests end
    within `shutdown_timeout`. A worker (cli/worker.py) listens on its own SO_REUSEPORT
    socket and reports when it does (`on_listening`)."""
    # Signals first: the embedded child is launched during setup, and a SIGTERM from then
    # on must stop it in order rather than kill this process with the default action.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    # handler_cancellation: a client that hangs up cancels its request's repair ladder.
    # GuardedRunner: header and body read timeouts, a connection cap under the file limit
    # (raised to its hard value first) and JSON protocol errors (http/connections.py).
    raise_file_limit()
    runner = GuardedRunner(app, settings, app[GUARD_KEY].telemetry, access_log=None,
                           handle_signals=False, handler_cancellation=True,
                           shutdown_timeout=shutdown_timeout)
    # Start-up garbage goes before the app's startup sets the rest of the heap aside from
    # the collector (settle_heap in http/app.py), so none of it is kept for good.
    gc.collect()
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, backlog=1024,
                       reuse_port=reuse_port or None)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    log = app[GUARD_KEY].telemetry.log
    log.info("listening", host=settings.host, port=settings.port, upstream=upstream,
             repair=settings.repair)
    if on_listening is not None:
        on_listening()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(settings: Settings) -> int:

    configure_logging(settings.log_level)
    try:
        if settings.upstream is not None:
            app = build_app(settings, settings.upstream)
            asyncio.run(run_server(settings, app, upstream_base(settings.upstream)))
            return 0
        # The embedded model writes tool calls as text: that is its server's output format.
        # llama-cpp-python's server speaks only Chat Completions: Messages and Responses are
        # translated, so ANTHROPIC_BASE_URL pointed here works out of the box.
        embedded = settings.model_copy(update={"tool_call_format": "content",
                                               "upstream_dialects": ["chat"]})
        variant = embedded.model_variant
        check_runtime()
        model = model_store.ensure(variant)  # may download once: before listening, not a lie
        supervisor = Supervisor(functools.partial(launch, variant, model, embedded.model_ctx,
                                                  embedded.model_threads))
        print(f"reflexguard: serving on http://{settings.host}:{settings.port}/v1; the "
              f"embedded model ({variant}) is starting on the CPU (GET /healthz answers 200 "
              f"once it is ready)", file=sys.stderr)
        asyncio.run(run_server(embedded, supervised_app(embedded, supervisor),
                           f"embedded {variant} (supervised)"))
    except (ChildFailed, model_store.ModelError, ValueError) as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        where = f"{settings.host}:{settings.port}"
        raise CliError(f"cannot listen on {where}: {exc.strerror}") from None
    return 0
