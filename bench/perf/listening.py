"""Waiting until every process of a multi-process server listens on its loopback port.

Shared by `bench.overhead` and the scripts under bench/perf that start N-process servers;
it lives here, below both, so that bench.perf never imports bench.overhead (the
acyclic-siblings contract in pyproject.toml).
"""

from __future__ import annotations

import time
from pathlib import Path

LISTEN_TIMEOUT = 60.0  # seconds for every worker of a multi-process server to listen


def listeners(port: int) -> int:
    """Sockets listening on the loopback port: one per worker under SO_REUSEPORT."""
    suffix = f":{port:04X}"
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        count += fields[1].endswith(suffix) and fields[3] == "0A"  # 0A: LISTEN
    return count


def wait_listening(port: int, processes: int) -> None:
    """Until every process listens: connections made before would all land on the first."""
    deadline = time.monotonic() + LISTEN_TIMEOUT
    while listeners(port) < processes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {processes} listeners on port {port}")
        time.sleep(0.1)
