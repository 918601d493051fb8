"""`python -m bench.overhead --stream`: what reflexguard adds to streamed answers (issue 23).

In one run: the streaming fake upstream (bench.perf.stream_upstream, simulated), the minimal
pass-through (streaming the same bytes through) and reflexguard, each its own process,
driven in alternating rounds at each concurrency, per dialect and scene:
- first text byte: from sending the request to the first event that carries text (`text`:
  released at once; `code`: a fenced block, which reflexguard holds);
- hold: from the upstream's last byte (its own CLOCK_MONOTONIC stamp) to the client's last
  byte (`call`: a ~2 KB valid tool call, which reflexguard holds until it is whole).
Printed as p50/p99, added over direct, and reflexguard's added as a ratio to the minimal's,
then each server's own CPU per stream (from /proc), which the machine's load moves least;
with `--against DIR`, also a copy of reflexguard imported from DIR (`rg@copy`: before/after
in one run). Never asserted: only ratios of the same run mean anything on a shared machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from bench.perf.processes import process
from bench.perf.stream_bounds import body as request_body
from bench.perf.stream_bounds import cpu_seconds
from bench.perf.stream_stats import absorb, added_row, ratio
from bench.perf.stream_upstream import ROUTES, SCENES
from reflexguard.ops.loopback import free_port

PLACEHOLDER = b"rgbench-0"
COPY = "rg@copy"  # reflexguard imported from --against
GOAL_MS = 1.0  # issue 23: first text byte and a 2 KB call's hold, each <= 1 ms added at p50


@dataclass
class Samples:
    first_text_ms: list[float] = field(default_factory=list)
    hold_ms: list[float] = field(default_factory=list)
    errors: int = 0
    cpu_s: float = 0.0  # the server's own CPU (from /proc) over the timed streams
    streams: int = 0


def template(dialect: str, scene: str) -> bytes:
    raw = orjson.dumps(request_body(dialect, scene))
    return raw.replace(b"Write the file.", b"Write the file. " + PLACEHOLDER, 1)


def carries_text(dialect: str, event: bytes) -> bool:
    """Whether one SSE event carries answer text (not a call, not an empty role delta)."""
    line = next((x for x in event.split(b"\n") if x.startswith(b"data: ")), b"")
    payload = line[6:]
    if not payload or payload == b"[DONE]":
        return False
    value = orjson.loads(payload)
    if dialect == "chat":
        return any((c.get("delta") or {}).get("content") for c in value.get("choices") or [])
    if dialect == "messages":
        delta = value.get("delta") or {}
        return value.get("type") == "content_block_delta" and bool(delta.get("text"))
    return value.get("type") == "response.output_text.delta" and bool(value.get("delta"))


async def one(session: aiohttp.ClientSession, url: str, dialect: str, raw: bytes,
              ) -> tuple[int, int | None, int]:
    """(status, first text byte's instant or None, last byte's instant), monotonic ns."""
    began = time.monotonic_ns()
    first: int | None = None
    pending = b""
    async with session.post(url, data=raw, headers={"Content-Type": "application/json"},
                            ) as response:
        async for chunk in response.content.iter_any():
            if first is None:
                pending += chunk
                *events, pending = pending.split(b"\n\n")
                if any(carries_text(dialect, e) for e in events):
                    first = time.monotonic_ns()
        last = time.monotonic_ns()
        status = response.status
    return status, None if first is None else first - began, last


async def drive(url: str, stamps_url: str, dialect: str, scene: str, concurrency: int,
                requests: int, serial: list[int], pid: int) -> Samples:
    samples = Samples()
    lasts: dict[str, int] = {}
    raw = template(dialect, scene)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        remaining = min(requests, 10)

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                serial[0] += 1
                tag = str(serial[0]).encode()
                status, first, last = await one(
                    session, url, dialect, raw.replace(PLACEHOLDER, b"rgbench-" + tag, 1))
                if status != 200:
                    samples.errors += 1
                    continue
                if first is not None:
                    samples.first_text_ms.append(first / 1e6)
                lasts[tag.decode()] = last

        await asyncio.gather(*(worker() for _ in range(min(concurrency, 10))))  # warm
        samples.first_text_ms.clear()
        lasts.clear()
        remaining = requests
        cpu = cpu_seconds(pid)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        samples.cpu_s, samples.streams = cpu_seconds(pid) - cpu, requests
        async with session.get(stamps_url) as answer:
            upstream_last = await answer.json()
    samples.hold_ms = [(last - upstream_last[tag]) / 1e6 for tag, last in lasts.items()
                       if tag in upstream_last]
    samples.errors += len(lasts) - len(samples.hold_ms)  # a stream the upstream never ended
    return samples


def measure(args_requests: int, rounds: int, concurrencies: list[int], dialects: list[str],
            gap_ms: float, against: Path | None = None) -> None:
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}"
    print(f"reflexguard streaming benchmark: {args_requests} streams per point, {rounds} rounds, "
          f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("upstream: a fast fake (simulated SSE, each event its own write, "
          f"{'a yield every 8 events' if gap_ms <= 0 else f'{gap_ms} ms between events'}); "
          "text: 2 KB in 8-character deltas; code: the same in a fence (held); "
          "call: one valid ~2 KB call in 16-character deltas (held)")
    with ExitStack() as stack:
        # direct's CPU is the upstream's own; every other target's, that proxy's
        pids = {"direct": stack.enter_context(process(
            ["-m", "bench.perf.stream_upstream", "--port", str(upstream_port), "--gap-ms",
             str(gap_ms)], upstream_port)).pid}
        bases = {"direct": upstream}
        guard = ["-m", "reflexguard", "serve", "--upstream"]
        # PYTHONSAFEPATH: without it `-m` puts this tree first on the path (as overhead.py)
        # (the copy first, then any path this run was given: where its wheels may lie)
        copy = {"PYTHONSAFEPATH": "1", "PYTHONPATH": os.pathsep.join(
            [str(against), *filter(None, [os.environ.get("PYTHONPATH")])])} if against else None
        for name, argv, env in (
                ("minimal", ["-m", "bench.perf.minimal_proxy", "--upstream"], None),
                ("reflexguard", guard, None), *([(COPY, guard, copy)] if copy else [])):
            port = free_port()
            pids[name] = stack.enter_context(process([*argv, f"{upstream}/v1", "--port",
                                                      str(port)], port, env)).pid
            bases[name] = f"http://127.0.0.1:{port}"
        results: dict[tuple[str, str, str, int], Samples] = {}
        serial = [0]
        per_round = max(1, args_requests // rounds)
        for c in concurrencies:
            for _ in range(rounds):
                for dialect in dialects:
                    for scene in SCENES:
                        for target, base in bases.items():
                            got = asyncio.run(drive(base + ROUTES[dialect], upstream + "/stamps",
                                                    dialect, scene, c, per_round, serial,
                                                    pids[target]))
                            key = (target, dialect, scene, c)
                            absorb(results.setdefault(key, Samples()), got)
    report(results, dialects, concurrencies, COPY in bases)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def report(results: dict[tuple[str, str, str, int], Samples], dialects: list[str],
           concurrencies: list[int], with_copy: bool = False) -> None:
    print(f"\nms; added = p50 (or p99) minus direct's; ratio = reflexguard's added / the "
          f"minimal's; goal: reflexguard's added p50 <= {GOAL_MS} ms for text's first byte "
          "and call's hold" + (f"; old = {COPY} (--against)" if with_copy else ""))
    print(f"{'dialect':<10} {'scene':<5} {'what':<10} {'c':>3} {'direct p50':>10} "
          f"{'min +p50':>8} {'rg +p50':>8} {'ratio':>6} {'min +p99':>8} {'rg +p99':>8} "
          f"{'errors':>6} {'goal':>5}" + (f" {'old +p50':>8} {'old +p99':>8}"
                                          if with_copy else ""))
    rows = []
    for dialect in dialects:
        for scene in SCENES:
            whats = ["first_text", "hold"] if scene != "call" else ["hold"]
            for what in whats:
                for c in concurrencies:
                    targets = ("direct", "minimal", "reflexguard", *([COPY] if with_copy else []))
                    got = {t: getattr(results[t, dialect, scene, c], f"{what}_ms")
                           for t in targets}
                    errors = sum(results[t, dialect, scene, c].errors for t in got)
                    row = added_row(got["direct"], got["minimal"], got["reflexguard"])
                    goal = ("" if (what, scene) not in (("first_text", "text"), ("hold", "call"))
                            else "met" if row.guard_p50 <= GOAL_MS else "MISS")
                    old = added_row(got["direct"], got["minimal"], got[COPY]) \
                        if with_copy else None
                    print(f"{dialect:<10} {scene:<5} {what:<10} {c:>3} {row.direct_p50:>10.2f} "
                          f"{row.minimal_p50:>8.2f} {row.guard_p50:>8.2f} {row.ratio:>6.2f} "
                          f"{row.minimal_p99:>8.2f} {row.guard_p99:>8.2f} {errors:>6} "
                          f"{goal:>5}" + (f" {old.guard_p50:>8.2f} {old.guard_p99:>8.2f}"
                                          if old else ""), flush=True)
                    rows.append({"dialect": dialect, "scene": scene, "what": what, "c": c,
                                 "errors": errors, **row.__dict__,
                                 **({"copy_p50": old.guard_p50, "copy_p99": old.guard_p99}
                                    if old else {})})
    cpu_report(results, dialects, concurrencies, with_copy)
    if os.environ.get("BENCH_STREAM_JSON"):
        with open(os.environ["BENCH_STREAM_JSON"], "w") as out:
            json.dump(rows, out, indent=1)


def cpu_report(results: dict[tuple[str, str, str, int], Samples], dialects: list[str],
               concurrencies: list[int], with_copy: bool) -> None:
    """Each proxy's own CPU per stream (from /proc): what the machine's load does not
    change much, unlike the latencies above."""
    print("\nCPU ms per stream, each server's own (direct: the upstream's)")
    print(f"{'dialect':<10} {'scene':<5} {'c':>3} {'direct':>7} {'minimal':>7} "
          f"{'rg':>7} {'rg/min':>6}" + (f" {'old':>7} {'rg/old':>6}" if with_copy else ""))
    for dialect in dialects:
        for scene in SCENES:
            for c in concurrencies:
                per = {t: ratio(s.cpu_s * 1e3, s.streams) for (t, d, sc, cc), s
                       in results.items() if (d, sc, cc) == (dialect, scene, c)}
                line = (f"{dialect:<10} {scene:<5} {c:>3} {per['direct']:>7.2f} "
                        f"{per['minimal']:>7.2f} {per['reflexguard']:>7.2f} "
                        f"{ratio(per['reflexguard'], per['minimal']):>6.2f}")
                if with_copy:
                    line += (f" {per[COPY]:>7.2f} "
                             f"{ratio(per['reflexguard'], per[COPY]):>6.2f}")
                print(line, flush=True)
