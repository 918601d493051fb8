"""`bench.overhead`'s ratios, printed from the points of one run, and its in-process
micro-measurements (validating a call; reading a request, tool-set lookup included)."""

from __future__ import annotations

import timeit
from collections.abc import Callable

from bench.perf.load import Point

Results = dict[tuple[str, str, int], Point]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def report(results: Results, workloads: list[str], concurrencies: list[int],
           workers: list[int], margins: bool, copy: str | None = None) -> None:
    print("\nadded over direct (ms), and ratios to the minimal pass-through with as many "
          "processes\n(issue 11's goal: rps ratio >= 0.8 at c=50, one worker, 8 and 15 tools)")
    print(f"{'target':<14} {'workload':>9} {'c':>4} {'min +p50':>9} {'rg +p50':>8} "
          f"{'ratio':>6} {'min +p99':>9} {'rg +p99':>8} {'rps ratio':>9}")
    pairs = [(f"rg-{n}w", f"minimal-{n}p") for n in workers]
    if margins:
        pairs.append(("rg-1w+margins", f"minimal-{workers[0]}p"))
    if copy:
        pairs.append((copy, f"minimal-{workers[0]}p"))
    for workload in workloads:
        for concurrency in concurrencies:
            direct = results["direct", workload, concurrency]
            for guard, minimal in pairs:
                rg = results[guard, workload, concurrency]
                base = results[minimal, workload, concurrency]
                base_p50 = base.quantile(0.5) - direct.quantile(0.5)
                rg_p50 = rg.quantile(0.5) - direct.quantile(0.5)
                print(f"{guard:<14} {workload:>9} {concurrency:>4} {base_p50:>9.2f} "
                      f"{rg_p50:>8.2f} {_ratio(rg_p50, base_p50):>6.2f} "
                      f"{base.quantile(0.99) - direct.quantile(0.99):>9.2f} "
                      f"{rg.quantile(0.99) - direct.quantile(0.99):>8.2f} "
                      f"{_ratio(rg.rps, base.rps):>9.2f}")
    if len(workers) > 1:
        _scaling(results, workloads, concurrencies, workers)
    if margins:
        _versus(results, workloads, concurrencies, "rg-1w+margins", "rg-1w",
                "margins on against off (rg-1w+margins vs rg-1w; the upstream then also "
                "sends ~11 KB of simulated logprobs)")
    if copy:
        _versus(results, workloads, concurrencies, "rg-1w", copy,
                f"this tree against the copy (rg-1w vs {copy})")
    if copy and margins:
        _versus(results, workloads, concurrencies, "rg-1w+margins", f"{copy}+margins",
                f"margins on, this tree against the copy (rg-1w+margins vs {copy}+margins)")
    _micro(workloads)


def _scaling(results: Results, workloads: list[str], concurrencies: list[int],
             workers: list[int]) -> None:
    c = 50 if 50 in concurrencies else max(concurrencies)
    one, most = workers[0], workers[-1]
    print(f"\nscaling at c={c}: {most} vs {one} (goals: rg's own ratio >= 0.9x the minimal's; "
          f"rg-{most}w >= 0.8x minimal-{most}p)")
    print(f"{'workload':>9} {f'min {most}p/{one}p':>11} {f'rg {most}w/{one}w':>11} "
          f"{'rg/min':>7} {f'rg-{most}w/min-{most}p':>16} {f'rg-{most}w req/s':>14}")
    for workload in workloads:
        def rps(name: str, workload: str = workload) -> float:
            return results[name, workload, c].rps

        minimal = _ratio(rps(f"minimal-{most}p"), rps(f"minimal-{one}p"))
        guard = _ratio(rps(f"rg-{most}w"), rps(f"rg-{one}w"))
        print(f"{workload:>9} {minimal:>11.2f} {guard:>11.2f} {_ratio(guard, minimal):>7.2f} "
              f"{_ratio(rps(f'rg-{most}w'), rps(f'minimal-{most}p')):>16.2f} "
              f"{rps(f'rg-{most}w'):>14.0f}")


def _versus(results: Results, workloads: list[str], concurrencies: list[int], one: str,
            other: str, title: str) -> None:
    print(f"\n{title}")
    print(f"{'workload':>9} {'c':>4} {'+p50 ms':>8} {'+p99 ms':>8} {'+cpu ms/req':>11} "
          f"{'rps ratio':>9}")
    for workload in workloads:
        for c in concurrencies:
            a, b = results[one, workload, c], results[other, workload, c]
            cpu = (a.cpu_ms_per_request or 0.0) - (b.cpu_ms_per_request or 0.0)
            print(f"{workload:>9} {c:>4} {a.quantile(0.5) - b.quantile(0.5):>8.2f} "
                  f"{a.quantile(0.99) - b.quantile(0.99):>8.2f} {cpu:>11.3f} "
                  f"{_ratio(a.rps, b.rps):>9.2f}")


def _per_call_us(call: Callable[[], object], number: int) -> float:
    """The fastest of 15 batches: on a shared machine the minimum is what the code costs."""
    return min(timeit.repeat(call, number=number, repeat=15)) / number * 1e6


def _micro(workloads: list[str]) -> None:
    from bench.perf.workload import TOOL_WORKLOADS

    measured = [w for w in workloads if w in TOOL_WORKLOADS]  # the chat requests
    if measured:
        print("\nin-process, one call each (warm tool-set cache; fastest of 15 batches):")
    for workload in measured:
        _micro_one(workload, TOOL_WORKLOADS[workload][1])


def _micro_one(workload: str, raw: bytes) -> None:
    import orjson

    from bench.perf.workload import ANSWER
    from reflexguard.core.completion import reply_of
    from reflexguard.core.toolset import ToolSetCache
    from reflexguard.core.validate import validate_reply
    from reflexguard.dialects.chat_request import CHAT, GroundingPolicy
    from reflexguard.dialects.reader import read_request

    cache = ToolSetCache()
    rules = read_request(raw, CHAT, cache, GroundingPolicy()).rules
    assert rules is not None
    reply = reply_of(ANSWER["choices"][0])  # type: ignore[index]
    arguments = reply.tool_calls[0].arguments
    read_us = _per_call_us(lambda: read_request(raw, CHAT, cache, GroundingPolicy()), 300)
    parse_us = _per_call_us(lambda: orjson.loads(raw), 300)
    validate_us = _per_call_us(lambda: validate_reply(reply, rules), 2_000)
    args_us = _per_call_us(lambda: orjson.loads(arguments), 2_000)
    print(f"{workload:>3} tools: reading the {len(raw):,}-byte request {read_us:.1f} us "
          f"(parsing it alone {parse_us:.1f} us); validating the valid call "
          f"{validate_us:.1f} us (parsing its arguments alone {args_us:.1f} us)")
