"""The overhead benchmark's load client and what it measures: latencies, req/s, and the
CPU a server spent, its every worker included."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """User+system CPU of `root` and every live descendant: all of a server's workers,
    whether they share its process group or (as reflexguard's workers do) lead their own."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while being read
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        ticks[pid] = int(fields[11]) + int(fields[12])
    total = 0
    for pid, count in ticks.items():
        ancestor = pid
        while ancestor > 1 and ancestor != root:
            ancestor = parents.get(ancestor, 0)
        if ancestor == root:
            total += count
    return total / TICKS


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


async def drive(url: str, concurrency: int, requests: int, server: int | None,
                body: bytes) -> Point:
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

        cpu_before = tree_cpu_seconds(server) if server else 0.0
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
        cpu = (tree_cpu_seconds(server) - cpu_before) * 1000 / requests if server else None
    return Point(latencies, elapsed, errors, cpu)
