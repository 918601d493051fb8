"""`python -m bench.overhead --litellm`: what the reflexguard guardrail adds to LiteLLM proxy.

Two LiteLLM proxy processes in front of the same fast fake upstream, one with the
guardrail (post_call) and one without, driven in alternating rounds by one sequential
client. Needs the `litellm-proxy` extra. Printed, never asserted.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from bench.perf.litellm_proxy import litellm_proxy
from bench.perf.workload import REQUEST

# The proxies serve the fake upstream under the model name "m".
BODY = orjson.dumps({**REQUEST, "model": "m"})


def _drive(client: httpx.Client, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        began = time.perf_counter()
        response = client.post(url, content=BODY,
                               headers={"Content-Type": "application/json"})
        response.raise_for_status()
        out.append(time.perf_counter() - began)
    return out


def run(upstream: str, requests: int, rounds: int) -> None:
    per_round = max(1, requests // rounds)
    with tempfile.TemporaryDirectory() as tmp, \
            litellm_proxy(upstream, Path(tmp) / "bare", guarded=False) as bare, \
            litellm_proxy(upstream, Path(tmp) / "guarded", guarded=True) as guarded, \
            httpx.Client(timeout=30) as client:
        urls = {"bare": f"{bare}/chat/completions", "guarded": f"{guarded}/chat/completions"}
        times: dict[str, list[float]] = {"bare": [], "guarded": []}
        for url in urls.values():
            _drive(client, url, 20)  # warm up
        for _ in range(rounds):
            for name, url in urls.items():
                times[name] += _drive(client, url, per_round)
    b = statistics.median(times["bare"]) * 1000
    g = statistics.median(times["guarded"]) * 1000
    b99 = sorted(times["bare"])[int(0.99 * (len(times["bare"]) - 1))] * 1000
    g99 = sorted(times["guarded"])[int(0.99 * (len(times["guarded"]) - 1))] * 1000
    print(f"\nLiteLLM proxy: {requests} valid non-streamed calls per proxy, {rounds} rounds, "
          "sequential")
    print(f"{'proxy':<22} {'p50 ms':>8} {'p99 ms':>8}")
    print(f"{'litellm':<22} {b:>8.2f} {b99:>8.2f}")
    print(f"{'litellm + reflexguard':<22} {g:>8.2f} {g99:>8.2f}")
    print(f"added p50: {g - b:.2f} ms, ratio {g / b:.3f}; added p99: {g99 - b99:.2f} ms")
