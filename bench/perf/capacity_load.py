"""The capacity benchmark's load: paced streams held open by K processes (issue 34).

Each load process keeps its share of the concurrency busy for the point's duration: every
slot starts a stream, reads it to its end, and starts the next, its first start staggered
over the whole point so that streams do not move in lockstep (a real server's clients do
not) and a point shorter than one stream still records some.
Recorded for every stream that started after the warm-up: the first text byte (from sending
the request), the instant of its last byte (CLOCK_MONOTONIC, shared by every process of the
machine, so the parent reads a call's hold against the upstream's stamp), and its status.
Runs on uvloop when it imports, as bench/perf/many_core_load.py's client does.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.perf.stream_bench import PLACEHOLDER, carries_text

CUT_AFTER_S = 30.0  # a stream still open this long after the point ends is cut, an error


@dataclass(frozen=True)
class LoadSpec:
    url: str
    dialect: str
    raw: bytes  # the request, with PLACEHOLDER where each stream's tag goes
    concurrency: int  # this process's share
    start_ns: int  # CLOCK_MONOTONIC instant every load process starts at
    warm_s: float
    duration_s: float  # after the warm-up
    tag_base: int  # tags of this process: tag_base + serial (digits only: the upstream's TAG)


@dataclass
class LoadResult:
    first_text_ms: list[float] = field(default_factory=list)
    lasts: dict[str, int] = field(default_factory=dict)  # tag -> last byte, monotonic ns
    streams: int = 0  # every stream finished, warm-up included (the CPU's denominator)
    errors: int = 0


async def _stream(session: aiohttp.ClientSession, spec: LoadSpec, tag: str,
                  ) -> tuple[int, int | None, int]:
    """(status, first text byte in ns after sending or None, last byte's instant)."""
    began = time.monotonic_ns()
    first: int | None = None
    pending = b""
    raw = spec.raw.replace(PLACEHOLDER, b"rgbench-" + tag.encode(), 1)
    async with session.post(spec.url, data=raw,
                            headers={"Content-Type": "application/json"}) as response:
        async for chunk in response.content.iter_any():
            if first is None:
                pending += chunk
                *events, pending = pending.split(b"\n\n")
                if any(carries_text(spec.dialect, e) for e in events):
                    first = time.monotonic_ns() - began
        return response.status, first, time.monotonic_ns()


async def _load(spec: LoadSpec) -> LoadResult:
    result = LoadResult()
    serial = [0]
    await asyncio.sleep(max(0.0, (spec.start_ns - time.monotonic_ns()) / 1e9))
    began = time.monotonic()
    measured_from = began + spec.warm_s
    end = measured_from + spec.duration_s

    async def slot(session: aiohttp.ClientSession) -> None:
        # Arrivals spread over the whole point: a stream (seconds long) that only started
        # after the warm-up would otherwise leave a short point with none recorded.
        await asyncio.sleep(random.uniform(0, spec.warm_s + spec.duration_s))
        while time.monotonic() < end:
            serial[0] += 1
            tag = str(spec.tag_base + serial[0])
            started = time.monotonic()
            try:
                status, first, last = await _stream(session, spec, tag)
            except (TimeoutError, aiohttp.ClientError):
                status, first, last = 0, None, 0
            result.streams += 1
            if started < measured_from:
                continue
            if status != 200:
                result.errors += 1
                continue
            if first is not None:
                result.first_text_ms.append(first / 1e6)
            result.lasts[tag] = last

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=spec.warm_s + spec.duration_s + CUT_AFTER_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(slot(session) for _ in range(spec.concurrency)))
    return result


def run(spec: LoadSpec) -> LoadResult:
    """One load process's share of a point (the entry point of a spawned process)."""
    factory: Any = None
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_load(spec))
