"""`python -m bench.overhead`: what reflexguard adds to a valid, non-streamed tool call.

In one run it starts a fast fake upstream, the ~40-line baseline pass-through proxy and
reflexguard, each in its own process, and drives each target with an aiohttp load
client at several concurrencies. Figures are printed, never asserted: the machine is
shared and noisy, so only ratios measured in the same run mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.perf.dialect_workload import WORKLOADS
from bench.perf.processes import process
from bench.perf.workload import REQUEST_BYTES, TOOLS
from reflexguard.ops.loopback import free_port

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass
class Point:
    latencies: list[float]
    seconds: float
    errors: int
    cpu_ms_per_request: float | None

    def merge(self, other: Point) -> Point:
        if self.cpu_ms_per_request is None or other.cpu_ms_per_request is None:
            cpu = None
        else:
            n, m = len(self.latencies), len(other.latencies)
            cpu = (self.cpu_ms_per_request * n + other.cpu_ms_per_request * m) / (n + m)
        return Point(self.latencies + other.latencies, self.seconds + other.seconds,
                     self.errors + other.errors, cpu)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds


async def drive(url: str, concurrency: int, requests: int, pid: int | None,
                body: bytes = REQUEST_BYTES) -> Point:
    latencies: list[float] = []
    errors = 0
    remaining = requests
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(min(50, requests)):  # warm the pools and the tool-set cache
            async with session.post(url, data=body, headers=headers) as r:
                await r.read()

        async def worker() -> None:
            nonlocal remaining, errors
            while remaining > 0:
                remaining -= 1
                began = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - began)

        cpu_before = cpu_seconds(pid) if pid else 0.0
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
        cpu = (cpu_seconds(pid) - cpu_before) * 1000 / requests if pid else None
    return Point(latencies, elapsed, errors, cpu)


def validation_micro() -> tuple[float, float]:
    """Microseconds to validate one valid call, against parsing its arguments alone."""
    import orjson

    from bench.perf.workload import ANSWER
    from reflexguard.core.completion import reply_of
    from reflexguard.core.toolset import ToolSetCache
    from reflexguard.core.validate import validate_reply
    from reflexguard.dialects.chat_request import GroundingPolicy, read_request

    cache = ToolSetCache()
    rules = read_request(REQUEST_BYTES, cache, GroundingPolicy()).rules
    assert rules is not None
    reply = reply_of(ANSWER["choices"][0])  # type: ignore[index]
    arguments = reply.tool_calls[0].arguments
    rounds = 20_000
    began = time.perf_counter()
    for _ in range(rounds):
        validate_reply(reply, rules)
    validate_us = (time.perf_counter() - began) / rounds * 1e6
    began = time.perf_counter()
    for _ in range(rounds):
        orjson.loads(arguments)
    parse_us = (time.perf_counter() - began) / rounds * 1e6
    return validate_us, parse_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="per target and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 50, 200])
    parser.add_argument("--rounds", type=int, default=5,
                        help="targets alternate in rounds, so drifting machine load hits all")
    parser.add_argument("--dialect", choices=sorted(WORKLOADS), default="chat",
                        help="the route and wire format measured (issue 10)")
    parser.add_argument("--translated", action="store_true",
                        help="with --dialect messages|responses: reflexguard translates to "
                        "a chat-only upstream (--upstream-dialects chat)")
    parser.add_argument("--inprocess", action="store_true",
                        help="reflexguard.guard(openai client) against the bare client")
    parser.add_argument("--litellm", action="store_true",
                        help="LiteLLM proxy with the reflexguard guardrail against without it")
    args = parser.parse_args()
    if args.inprocess or args.litellm:
        from bench.perf.doors import measure_doors

        measure_doors(args.inprocess, args.litellm, args.requests, args.rounds)
        return
    route, body, _ = WORKLOADS[args.dialect]
    translated = args.translated and args.dialect != "chat"
    upstream_route = "chat/completions" if translated else route
    upstream_port, baseline_port, guard_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    print(f"reflexguard overhead benchmark: {len(TOOLS)} tools, valid non-streamed "
          f"tool calls, {args.requests} requests per point, {os.cpu_count()} cores")
    print("upstream: a fast fake (fixed simulated answer), so every figure is proxy cost")
    with process(["-m", "bench.perf.fast_upstream", "--port", str(upstream_port)], upstream_port), \
            process(["-m", "bench.perf.minimal_proxy", "--upstream", upstream, "--port",
                     str(baseline_port)], baseline_port) as baseline, \
            process(["-m", "reflexguard", "serve", "--upstream", upstream, "--port",
                     str(guard_port), *(["--upstream-dialects", "chat"] if translated else [])],
                    guard_port) as guard:
        # Translated, direct and baseline carry the chat request the upstream serves: the
        # ratio then includes the translation both ways.
        base_route, base_body = (("chat/completions", REQUEST_BYTES) if translated
                                 else (route, body))
        print(f"dialect: {args.dialect}{' (translated to chat)' if translated else ''}; "
              f"upstream route /v1/{upstream_route}")
        targets = {
            "direct": (f"{upstream}/{base_route}", None, base_body),
            "baseline": (f"http://127.0.0.1:{baseline_port}/v1/{base_route}", baseline.pid,
                         base_body),
            "reflexguard": (f"http://127.0.0.1:{guard_port}/v1/{route}", guard.pid, body),
        }
        print(f"\n{'target':<12} {'c':>4} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} "
              f"{'cpu ms/req':>10} {'errors':>6}")
        results: dict[tuple[str, int], Point] = {}
        per_round = max(1, args.requests // args.rounds)
        for concurrency in args.concurrency:
            for _ in range(args.rounds):
                for name, (url, pid, payload) in targets.items():
                    point = asyncio.run(drive(url, concurrency, per_round, pid, payload))
                    earlier = results.get((name, concurrency))
                    results[name, concurrency] = earlier.merge(point) if earlier else point
            for name in targets:
                point = results[name, concurrency]
                cpu = f"{point.cpu_ms_per_request:.2f}" if point.cpu_ms_per_request else "-"
                print(f"{name:<12} {concurrency:>4} {point.quantile(0.5):>8.2f} "
                      f"{point.quantile(0.99):>8.2f} {point.rps:>8.0f} {cpu:>10} "
                      f"{point.errors:>6}")
    print("\nadded over direct (ms) and reflexguard/baseline ratios")
    print(f"{'c':>4} {'base +p50':>10} {'rg +p50':>9} {'ratio':>6} {'base +p99':>10} "
          f"{'rg +p99':>9} {'rps ratio':>9}")
    for concurrency in args.concurrency:
        direct = results["direct", concurrency]
        base = results["baseline", concurrency]
        rg = results["reflexguard", concurrency]
        base_p50 = base.quantile(0.5) - direct.quantile(0.5)
        rg_p50 = rg.quantile(0.5) - direct.quantile(0.5)
        base_p99 = base.quantile(0.99) - direct.quantile(0.99)
        rg_p99 = rg.quantile(0.99) - direct.quantile(0.99)
        ratio = rg_p50 / base_p50 if base_p50 > 0 else float("nan")
        print(f"{concurrency:>4} {base_p50:>10.2f} {rg_p50:>9.2f} {ratio:>6.2f} "
              f"{base_p99:>10.2f} {rg_p99:>9.2f} {rg.rps / base.rps:>9.2f}")
    validate_us, parse_us = validation_micro()
    print(f"\nvalidating one valid call: {validate_us:.1f} us "
          f"(parsing its arguments alone: {parse_us:.1f} us, "
          f"ratio {validate_us / parse_us:.1f})")


if __name__ == "__main__":
    main()
