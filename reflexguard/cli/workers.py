"""`reflexguard serve --workers N`: the parent's side, up to the point where it supervises.

This is an I/O edge. It runs before anything imports prometheus_client: prometheus_client
decides once, at its first import, whether values live in memory or in per-process files,
and the parent's own counts (a restarted worker) must land in the files the workers' /metrics
sums. So this module imports only the standard library and settings; the supervisor
(cli/pool.py) is imported once PROMETHEUS_MULTIPROC_DIR is set. docs/scaling.md says why
each choice was made.
"""

from __future__ import annotations

import os
import socket
import tempfile

from reflexguard.cli.errors import CliError
from reflexguard.ops.config import Settings

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def reserve(host: str, port: int) -> tuple[socket.socket, int]:
    """A bound, never-listening SO_REUSEPORT socket on host:port, and the port.

    It turns port 0 into the one port every worker binds; it fails at once, in one line,
    when another program holds the port (a plain bind first, so that a second reflexguard
    with workers cannot silently join this one's SO_REUSEPORT group); and it keeps the port
    ours while all workers are down. Linux hands connections only to the group's *listening*
    sockets, so this one never receives any."""
    where = f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
            address = (address[0], probe.getsockname()[1], *address[2:])
        held = socket.socket(family, kind, proto)
    except OSError as exc:
        raise CliError(f"cannot listen on {where}: {exc.strerror}") from None
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(address)
    except OSError as exc:
        held.close()
        raise CliError(f"cannot listen on {where}: {exc.strerror}") from None
    return held, int(held.getsockname()[1])


def serve_workers(settings: Settings) -> int:
    """The parent: reserve the port, make the shared metrics directory, supervise."""
    if settings.upstream is None:
        raise CliError("--workers needs --upstream: the embedded model is one supervised "
                       "child of one server process (run it with --workers 1)")
    held, port = reserve(settings.host, settings.port)
    with held, tempfile.TemporaryDirectory(prefix="reflexguard-metrics-") as shared:
        # A private directory, made and removed here: files left by an earlier run would
        # be summed into this one's counts.
        os.environ[MULTIPROC_ENV] = shared
        # Imported only now, on purpose: see the module's docstring.
        from reflexguard.cli.pool import supervise

        return supervise(settings.model_copy(update={"port": port}), shared)
