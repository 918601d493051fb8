"""`python -m bench.state_latency`: what shared session state costs, measured in one run.

Starts a real `redis-server` on a free loopback port (or uses `--redis URL`) and times, per
operation, one session write (HINCRBY/HSET/EVAL/EXPIRE in one MULTI) and one session read
(HGETALL) against Redis and against the in-memory store, p50/p99 over `--ops` operations.
Also times what a request itself pays at its outcome (`SessionState.finish`): the Redis
write is fire-and-forget, so that figure is the local write plus scheduling the task.
Figures only, never asserted. Redis on loopback shares this machine's cores with the bench.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from reflexguard.ops.loopback import free_port
from reflexguard.ops.state import (
    KEY_PREFIX,
    MemoryStore,
    RedisStore,
    SessionDelta,
    SessionState,
    SessionStore,
    memory_state,
    session_state,
)

SESSIONS = 100  # distinct sessions the operations cycle through
WARMUP = 100


def quantile_us(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def delta() -> SessionDelta:
    return SessionDelta(Counter({"unknown_tool": 1}), 1, 0, 2, time.time())


async def timed(ops: int, op: Callable[[int], Awaitable[object]]) -> list[float]:
    for index in range(WARMUP):
        await op(index)
    samples = []
    for index in range(ops):
        started = time.perf_counter()
        await op(index)
        samples.append(time.perf_counter() - started)
    return samples


async def store_figures(store: SessionStore, ops: int
                        ) -> tuple[list[float], list[float], float]:
    """Write and read latencies, and this process's CPU seconds per write (what the
    background write takes from the event loop that serves requests)."""
    cpu = time.process_time()
    writes = await timed(ops, lambda i: store.record(f"bench-{i % SESSIONS}", delta()))
    cpu_per_write = (time.process_time() - cpu) / (ops + WARMUP)
    reads = await timed(ops, lambda i: store.get(f"bench-{i % SESSIONS}"))
    return writes, reads, cpu_per_write


async def finish_figures(state: SessionState, ops: int) -> tuple[list[float], float]:
    """What a request pays at its outcome, and this process's CPU seconds per request with
    its background write included (requests arriving back to back, so writes coalesce)."""
    samples = []
    cpu = time.process_time()
    for index in range(WARMUP + ops):
        started = time.perf_counter()
        state.saw(f"r{index}", "unknown_tool")
        state.finish(f"r{index}", f"bench-{index % SESSIONS}", "exhausted", 2)
        elapsed = time.perf_counter() - started
        if index >= WARMUP:
            samples.append(elapsed)
        if state.writes_in_flight >= 64:  # let the background writes run, untimed
            await state.flush()
    await state.flush()
    return samples, (time.process_time() - cpu) / (WARMUP + ops)


def start_redis(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("bench.state_latency: redis-server is not installed "
                         "(scripts/setup.sh installs it), or pass --redis URL")
    port = free_port()
    child = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", directory],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return child, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.02)
    child.terminate()
    raise SystemExit("bench.state_latency: redis-server did not start")


def row(name: str, samples: list[float], baseline: list[float]) -> str:
    p50, p99 = quantile_us(samples, 0.5), quantile_us(samples, 0.99)
    ratio = p50 / max(quantile_us(baseline, 0.5), 1e-3)
    return f"  {name:<34} p50 {p50:9.1f} µs   p99 {p99:9.1f} µs   p50 {ratio:7.1f}× memory"


async def run(url: str, ops: int) -> None:
    redis = RedisStore(url, ttl=3600, timeout=5)
    memory = MemoryStore(ttl=3600)
    mem_writes, mem_reads, mem_cpu = await store_figures(memory, ops)
    redis_writes, redis_reads, redis_cpu = await store_figures(redis, ops)
    local_finish, local_cpu = await finish_figures(memory_state(3600), ops)
    shared = session_state(url, 3600, 5)
    shared_finish, shared_cpu = await finish_figures(shared, ops)
    await shared.close()
    await redis.client.delete(*(f"{KEY_PREFIX}bench-{i}" for i in range(SESSIONS)))
    await redis.close()
    print(f"session state latency, {ops} operations each over {SESSIONS} sessions, "
          f"Redis on loopback ({url}), one process, one run:")
    print(row("write: memory store", mem_writes, mem_writes))
    print(row("write: Redis (one MULTI)", redis_writes, mem_writes))
    print(row("read: memory store", mem_reads, mem_reads))
    print(row("read: Redis (HGETALL)", redis_reads, mem_reads))
    print(row("request pays: finish(), memory", local_finish, local_finish))
    print(row("request pays: finish(), Redis", shared_finish, local_finish))
    print(f"  CPU of this process per single write: memory {mem_cpu * 1e6:.1f} µs, "
          f"Redis {redis_cpu * 1e6:.1f} µs")
    print(f"  CPU per request, its background write included (back to back, so coalesced): "
          f"memory {local_cpu * 1e6:.1f} µs, Redis {shared_cpu * 1e6:.1f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.state_latency", description=__doc__)
    parser.add_argument("--redis", help="an existing Redis URL (default: start "
                        "redis-server); the bench deletes the keys it wrote")
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    if args.redis:
        asyncio.run(run(args.redis, args.ops))
        return
    with tempfile.TemporaryDirectory() as directory:
        child, url = start_redis(directory)
        try:
            asyncio.run(run(url, args.ops))
        finally:
            child.terminate()
            child.wait(timeout=10)


if __name__ == "__main__":
    main()
