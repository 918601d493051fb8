"""The benchmark's servers as child processes, up once their port accepts a connection.

An I/O edge. `lifetime.spawn` makes each server die with the benchmark, even if the
benchmark is killed. A child's output (stdout and stderr) goes to an unlinked temporary
file, so a child that exits before it listens, or never listens, fails the benchmark with
the tail of what it said (issue 34: `serve ... exited with 1` and nothing else, on a
machine without the OpenTelemetry wheels). A serving child logs at start-up and on
warnings, not per request (clean answers write no log line), so the file stays small.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from reflexguard.embedded import lifetime

READY_TIMEOUT = 30.0
TAIL_BYTES = 4000  # of a failed child's output, in its error
TAIL_LINES = 25


def tail(log: IO[bytes]) -> str:
    """The last lines the child wrote, or a word saying it wrote none."""
    log.flush()
    size = log.seek(0, os.SEEK_END)
    log.seek(max(0, size - TAIL_BYTES))
    lines = log.read().decode("utf-8", "replace").splitlines()[-TAIL_LINES:]
    return "\n".join(f"  | {line}" for line in lines) if lines else "  (it wrote nothing)"


@contextmanager
def process(args: list[str], port: int, env: dict[str, str] | None = None,
            ) -> Iterator[subprocess.Popen[bytes]]:
    """`python ARGS` serving on `port`, stopped (its whole group) when the block ends;
    `env` adds to this process's environment. RuntimeError, with the child's last words,
    if it exits or does not listen within READY_TIMEOUT."""
    with tempfile.TemporaryFile(prefix="bench-child-") as log:
        child = lifetime.spawn([sys.executable, *args], log,
                               {**os.environ, **env} if env else None).process
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while True:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if child.poll() is not None:
                    raise RuntimeError(f"{' '.join(args)} exited with {child.returncode} "
                                       f"before listening on {port}; its output ended:\n"
                                       f"{tail(log)}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(args)} did not listen on {port} within "
                                       f"{READY_TIMEOUT:.0f} s; its output ended:\n{tail(log)}")
                time.sleep(0.05)
            yield child
        finally:
            lifetime.stop(child)
