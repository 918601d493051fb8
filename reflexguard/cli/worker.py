"""One worker of `serve --workers N`: `python -m reflexguard.cli.worker INDEX`.

This is an I/O edge, started only by cli/pool.py: the settings arrive as JSON on stdin, the
worker binds its own SO_REUSEPORT socket on the shared port (one socket per worker, so the
kernel spreads connections, keep-alive ones included, over the workers), writes
`listening` on stdout once it does, and serves until SIGTERM, then drains within
`worker_grace`. Every response names its worker in `x-reflexguard-worker`.
"""

from __future__ import annotations

import asyncio
import os
import sys

import orjson
from aiohttp import web

from reflexguard.cli.errors import EXIT_USAGE
from reflexguard.cli.pool import READY_LINE
from reflexguard.cli.serve import run_server
from reflexguard.core.urls import upstream_base
from reflexguard.http.app import build_app
from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import configure_logging, multiprocess_dir

WORKER_HEADER = "x-reflexguard-worker"


def _report_listening() -> None:
    os.write(1, READY_LINE)
    # The pipe has done its job: later stray output goes where the logs go.
    os.dup2(2, 1)


def _fail(message: str) -> int:
    print(f"reflexguard: error: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        return _fail("usage: python -m reflexguard.cli.worker INDEX (started by serve "
                     "--workers)")
    index = argv[1]
    settings = Settings(**orjson.loads(sys.stdin.buffer.read()))
    configure_logging(settings.log_level)
    if multiprocess_dir() is None:
        return _fail("a worker needs the shared metrics directory that `serve --workers` "
                     "sets (PROMETHEUS_MULTIPROC_DIR)")
    app = build_app(settings)

    async def name_the_worker(_: web.Request, response: web.StreamResponse) -> None:
        response.headers[WORKER_HEADER] = index

    app.on_response_prepare.append(name_the_worker)
    try:
        asyncio.run(run_server(settings, app, upstream_base(settings.upstream or ""),
                               reuse_port=True, shutdown_timeout=settings.worker_grace,
                               on_listening=_report_listening))
    except OSError as exc:
        return _fail(f"worker {index} cannot listen on {settings.host}:{settings.port}: "
                     f"{exc.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
