"""The two doors without a hop, each against its bare counterpart on the same fast fake
upstream, in one run (`python -m bench.overhead --inprocess`, `--litellm`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from bench.perf.processes import process
from bench.perf.workload import TOOLS
from reflexguard.ops.loopback import free_port


@contextmanager
def fast_upstream() -> Iterator[str]:
    port = free_port()
    with process(["-m", "bench.perf.fast_upstream", "--port", str(port)], port):
        yield f"http://127.0.0.1:{port}/v1"


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
