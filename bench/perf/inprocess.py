"""`python -m bench.overhead --inprocess`: what `reflexguard.guard` adds to a valid call.

The bare `openai` client and the guarded one call the same fast fake upstream (its own
process), in alternating rounds so drifting machine load hits both; sync and async.
Printed, never asserted: only the difference and ratio within one run mean anything.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai

import reflexguard
from bench.perf.workload import REQUEST

Call = Callable[[], Any]


def _time_sync(call: Call, n: int) -> list[float]:
    out = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        out.append(time.perf_counter() - began)
    return out


async def _time_async(call: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        began = time.perf_counter()
        await call()
        out.append(time.perf_counter() - began)
    return out


def _report(label: str, bare: list[float], guarded: list[float]) -> None:
    b, g = statistics.median(bare) * 1e6, statistics.median(guarded) * 1e6
    print(f"{label:<6} {b:>10.0f} {g:>12.0f} {g - b:>10.0f} {g / b:>7.3f}")


def run(upstream: str, requests: int, rounds: int) -> None:
    body = {k: v for k, v in REQUEST.items()}
    per_round = max(1, requests // rounds)
    sync_bare: Any = openai.OpenAI(base_url=upstream, api_key="unused", max_retries=0)
    sync_guarded = reflexguard.guard(openai.OpenAI(base_url=upstream, api_key="unused",
                                                   max_retries=0))
    print(f"\nin-process: {requests} valid non-streamed calls per client, {rounds} rounds "
          "(median per call)")
    print(f"{'client':<6} {'bare us':>10} {'guarded us':>12} {'added us':>10} {'ratio':>7}")
    bare: list[float] = []
    guarded: list[float] = []

    def bare_call() -> Any:
        return sync_bare.chat.completions.create(**body)

    def guarded_call() -> Any:
        return sync_guarded.chat.completions.create(**body)

    _time_sync(bare_call, 20)  # warm connections and the tool-set cache
    _time_sync(guarded_call, 20)
    for _ in range(rounds):
        bare += _time_sync(bare_call, per_round)
        guarded += _time_sync(guarded_call, per_round)
    _report("sync", bare, guarded)
    asyncio.run(_run_async(upstream, body, per_round, rounds))


async def _run_async(upstream: str, body: dict[str, Any], per_round: int, rounds: int) -> None:
    bare_client: Any = openai.AsyncOpenAI(base_url=upstream, api_key="unused", max_retries=0)
    guarded_client = reflexguard.guard(openai.AsyncOpenAI(base_url=upstream, api_key="unused",
                                                          max_retries=0))

    async def bare_call() -> Any:
        return await bare_client.chat.completions.create(**body)

    async def guarded_call() -> Any:
        return await guarded_client.chat.completions.create(**body)

    await _time_async(bare_call, 20)
    await _time_async(guarded_call, 20)
    bare: list[float] = []
    guarded: list[float] = []
    for _ in range(rounds):
        bare += await _time_async(bare_call, per_round)
        guarded += await _time_async(guarded_call, per_round)
    _report("async", bare, guarded)
