"""The two doors without a hop, each against its bare counterpart on the same fast fake
upstream, in one run (`python -m bench.overhead --inprocess`, `--litellm`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench.perf.workload import TOOLS
from reflexguard.embedded import lifetime
from reflexguard.ops.loopback import free_port


@contextmanager
def fast_upstream() -> Iterator[str]:
    port = free_port()
    child = lifetime.spawn([sys.executable, "-m", "bench.perf.fast_upstream", "--port",
                            str(port)], subprocess.DEVNULL).process
    try:
        import socket

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        lifetime.stop(child)


def measure_doors(inprocess: bool, litellm: bool, requests: int, rounds: int) -> None:
    print(f"reflexguard without a hop: {len(TOOLS)} tools, valid non-streamed tool calls, "
          f"{os.cpu_count()} cores; upstream: a fast fake (fixed valid answer)")
    with fast_upstream() as upstream:
        if inprocess:
            from bench.perf import inprocess as measure_inprocess

            measure_inprocess.run(upstream, requests, rounds)
        if litellm:
            from bench.perf import litellm_gateway

            litellm_gateway.run(upstream, requests, rounds)
