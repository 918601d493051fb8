"""`python -m bench.soak`: rounds of concurrent, mixed requests through reflexguard, against
a scripted fake upstream that injects faults. Nothing may be lost or crossed.

The upstream is a fake (`bench.perf.soak_upstream`): slow replies, 500s, HTML 502s, cut
bodies and streams, garbage, hangs past the timeout, invalid calls that need a repair,
and text that once wedged the event loop. reflexguard runs as its own process, as in
production; everything listens on 127.0.0.1. Each request carries a unique id that the
fake echoes; an answer holding another request's id is "crossed". A few requests are
abandoned by the client on purpose (an agent cancelling), and are counted apart.

Per round it prints: requests lost (no HTTP answer), crossed, answers by status, answers
that echo their own id, stream answers that ended with an error event, p50/p99 latency
of every answer and p99 of the 200s (the hang scenario's 504s sit at the 3 s upstream
timeout), and the proxy's RSS and open file descriptors. Bounded: `--rounds` ×
`--requests`, and `--max-seconds` overall.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
import orjson
import psutil

from bench.perf.soak_upstream import HANG_SECONDS, SCENARIOS
from bench.perf.workload import REQUEST
from reflexguard.ops.loopback import free_port

RID = re.compile(rb"soak-[0-9a-f]{12}")
ABANDON_AFTER = 0.3  # seconds before the client walks away in the "abort" scenario
CLIENT_TIMEOUT = 30.0
PROXY_ENV = {  # short timeouts, so that the "hang" scenario ends inside a round
    "REFLEXGUARD_UPSTREAM_TIMEOUT": "3", "REFLEXGUARD_REQUEST_TIMEOUT": "20",
    "REFLEXGUARD_LOG_LEVEL": "warning",
}


@dataclass(frozen=True)
class Result:
    scenario: str
    stream: bool
    status: int | None  # None: no HTTP answer at all
    seconds: float
    lost: str | None = None  # why there was no answer
    aborted: bool = False  # the client walked away on purpose
    crossed: bool = False  # the answer held another request's id
    echoed: bool = False  # the answer held this request's own id
    error_event: bool = False  # a 200 stream that ended with an error event


def request_body(rid: str, scenario: str, stream: bool) -> bytes:
    messages = [*cast(list[Any], REQUEST["messages"]), {
        "role": "user", "content": f"Please cancel my order. rid={rid} scenario={scenario}"}]
    return orjson.dumps({**REQUEST, "messages": messages, "stream": stream})


def read_answer(rid: str, scenario: str, stream: bool, status: int, data: bytes,
                seconds: float) -> Result:
    ids = set(RID.findall(data))
    error_event = stream and status == 200 and b'data: {"error"' in data
    return Result(scenario, stream, status, seconds, crossed=bool(ids - {rid.encode()}),
                  echoed=rid.encode() in ids, error_event=error_event)


async def one(session: aiohttp.ClientSession, url: str, rid: str, scenario: str,
              stream: bool, gate: asyncio.Semaphore) -> Result:
    async with gate:
        began = time.perf_counter()
        body = request_body(rid, scenario, stream)
        try:
            async with asyncio.timeout(ABANDON_AFTER if scenario == "abort" else None), \
                    session.post(url, data=body,
                                 headers={"Content-Type": "application/json"}) as response:
                data = await response.read()
                return read_answer(rid, scenario, stream, response.status, data,
                                   time.perf_counter() - began)
        except TimeoutError:
            seconds = time.perf_counter() - began
            if scenario == "abort":
                return Result(scenario, stream, None, seconds, aborted=True)
            return Result(scenario, stream, None, seconds, lost="client timeout")
        except aiohttp.ClientError as exc:
            return Result(scenario, stream, None, time.perf_counter() - began,
                          lost=type(exc).__name__)


async def run_round(url: str, requests: int, concurrency: int, rng: random.Random,
                    number: int) -> list[Result]:
    names, weights = zip(*SCENARIOS.items(), strict=True)
    gate = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [
            one(session, url, f"soak-{number:02x}{index:010x}", rng.choices(names, weights)[0],
                rng.random() < 0.5, gate)
            for index in range(requests)
        ]
        return list(await asyncio.gather(*tasks))


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def wait_for_port(port: int, child: subprocess.Popen[bytes], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if child.poll() is not None:
                raise RuntimeError(f"child exited with {child.returncode}") from None
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


@contextmanager
def child(args: list[str], port: int, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, **env})
    try:
        wait_for_port(port, process)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


async def health_ms(url: str) -> float | None:
    began = time.perf_counter()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, \
                session.get(url) as response:
            await response.read()
            return (time.perf_counter() - began) * 1000 if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        return None


async def metric_lines(url: str, names: tuple[str, ...]) -> list[str]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, \
                session.get(url) as response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return ["(no /metrics answer)"]
    return [line for line in text.splitlines() if line.startswith(names)]


def describe(number: int, results: list[Result], seconds: float,
             proxy: psutil.Process) -> tuple[str, int, int]:
    answered = [r for r in results if r.status is not None]
    lost = sum(r.lost is not None for r in results)
    crossed = sum(r.crossed for r in results)
    statuses = Counter(r.status for r in answered)
    errors = " ".join(f"{s}:{n}" for s, n in sorted(statuses.items()) if s and s >= 400) or "-"
    latencies = [r.seconds for r in answered]
    line = (f"{number:>5} {len(results):>5} {statuses.get(200, 0):>5} "
            f"{sum(r.echoed for r in results):>6} {lost:>4} {crossed:>7} "
            f"{sum(r.aborted for r in results):>7} {sum(r.error_event for r in results):>6} "
            f"{quantile(latencies, 0.5):>7.0f} {quantile(latencies, 0.99):>7.0f} "
            f"{quantile([r.seconds for r in answered if r.status == 200], 0.99):>7.0f} "
            f"{proxy.memory_info().rss / 2**20:>7.1f} {proxy.num_fds():>4} {seconds:>6.1f}  "
            f"{errors}")
    return line, lost, crossed


def by_scenario(results: list[Result]) -> list[str]:
    table: dict[tuple[str, bool], Counter[str]] = {}
    for r in results:
        outcome = ("aborted" if r.aborted else f"lost:{r.lost}" if r.lost else
                   f"{r.status}+error_event" if r.error_event else str(r.status))
        table.setdefault((r.scenario, r.stream), Counter())[outcome] += 1
    return [f"  {name:<16} {'stream' if stream else 'json':<6} "
            + ", ".join(f"{k} ×{v}" for k, v in sorted(counts.items()))
            for (name, stream), counts in sorted(table.items())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000, help="per round")
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="no new round starts past this")
    args = parser.parse_args()
    upstream_port, proxy_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    print("reflexguard soak — the upstream is a SCRIPTED FAKE (bench.perf.soak_upstream), "
          "not a model; loopback only")
    print(f"{args.rounds} rounds × {args.requests} requests, concurrency {args.concurrency}, "
          f"seed {args.seed}, {os.cpu_count()} cores; scenarios (%): "
          + ", ".join(f"{k} {v}" for k, v in SCENARIOS.items()))
    print(f"proxy settings: upstream timeout 3 s (hang = {HANG_SECONDS:g} s), request "
          f"timeout 20 s, max 2 repairs; half the requests streamed")
    rng = random.Random(args.seed)
    url = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
    everything: list[Result] = []
    total_lost = total_crossed = 0
    started = time.monotonic()
    upstream_args = ["-m", "bench.perf.soak_upstream", "--port", str(upstream_port)]
    with child(upstream_args, upstream_port, {}), \
            child(["-m", "reflexguard", "serve", "--upstream", upstream, "--port",
                   str(proxy_port)], proxy_port, PROXY_ENV) as guard:
        proxy = psutil.Process(guard.pid)
        print(f"proxy pid {guard.pid}, RSS at start {proxy.memory_info().rss / 2**20:.1f} MB")
        print(f"\n{'round':>5} {'sent':>5} {'200':>5} {'echoed':>6} {'lost':>4} "
              f"{'crossed':>7} {'aborted':>7} {'ev.err':>6} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'p99 200':>7} {'RSS MB':>7} {'fds':>4} {'secs':>6}  errors by status")
        for number in range(1, args.rounds + 1):
            if time.monotonic() - started > args.max_seconds:
                print(f"stopping: past --max-seconds {args.max_seconds:g}")
                break
            began = time.monotonic()
            results = asyncio.run(run_round(url, args.requests, args.concurrency, rng, number))
            line, lost, crossed = describe(number, results, time.monotonic() - began, proxy)
            print(line, flush=True)
            everything += results
            total_lost += lost
            total_crossed += crossed
        health = asyncio.run(health_ms(f"http://127.0.0.1:{proxy_port}/healthz"))
        counters = asyncio.run(metric_lines(f"http://127.0.0.1:{proxy_port}/metrics",
                                            ("reflexguard_fallbacks_total",
                                             "reflexguard_repairs_total")))
        print("\n/healthz after the soak: "
              + (f"{health:.1f} ms" if health is not None else "NO ANSWER"))
    print("proxy counters after the soak:")
    print("\n".join(f"  {line}" for line in counters))
    print("answers by scenario (all rounds):")
    print("\n".join(by_scenario(everything)))
    print(f"\ntotal: {len(everything)} requests, lost {total_lost}, crossed {total_crossed}, "
          f"{time.monotonic() - started:.0f} s")
    return 1 if total_lost or total_crossed or health is None else 0


if __name__ == "__main__":
    sys.exit(main())
