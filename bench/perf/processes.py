"""The benchmark's servers as child processes, up once their port accepts a connection.

An I/O edge. `lifetime.spawn` makes each server die with the benchmark, even if the
benchmark is killed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from reflexguard.embedded import lifetime

READY_TIMEOUT = 30.0


@contextmanager
def process(args: list[str], port: int, env: dict[str, str] | None = None,
            ) -> Iterator[subprocess.Popen[bytes]]:
    """`python ARGS` serving on `port`, stopped (its whole group) when the block ends;
    `env` adds to this process's environment."""
    child = lifetime.spawn([sys.executable, *args], subprocess.DEVNULL,
                           {**os.environ, **env} if env else None).process
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if child.poll() is not None:
                raise RuntimeError(f"{args} exited with {child.returncode}")
            time.sleep(0.05)
        yield child
    finally:
        lifetime.stop(child)
