"""The `--otel on` arms of bench.overhead, read against off in the same run (issues 21, 34).

Nothing here does I/O beyond printing. The goals: off costs nothing measurable (the
current tree with otel off against the copy given to --against, when one was), and on
costs at most 0.15 ms of server CPU per request with every trace kept (issue 34; 0.1 ms
was issue 21's). The server's CPU includes its batch-export threads.
"""

from __future__ import annotations

from bench.perf.load import Point

Results = dict[tuple[str, str, int], Point]


def _cpu(point: Point) -> float | None:
    return point.cpu_ms_per_request


def otel_report(results: Results, workloads: list[str], concurrencies: list[int],
                copy: str | None) -> None:
    print("\nOpenTelemetry (issue 21): server CPU per request and throughput, same run")
    print(f"{'arms':<26} {'workload':>9} {'c':>4} {'cpu ms/req':>18} {'added cpu ms':>12} "
          f"{'rps ratio':>9}")
    pairs = [("rg-1w+otel", "rg-1w"), ("rg-1w+otel10%", "rg-1w")]
    if copy:
        pairs.append(("rg-1w", copy))  # otel off against the code before the hooks
    for workload in workloads:
        for concurrency in concurrencies:
            for arm, base in pairs:
                a = results.get((arm, workload, concurrency))
                b = results.get((base, workload, concurrency))
                if a is None or b is None:
                    continue
                ca, cb = _cpu(a), _cpu(b)
                cpu = "-" if ca is None or cb is None else f"{ca:.3f} vs {cb:.3f}"
                added = "-" if ca is None or cb is None else f"{ca - cb:+.3f}"
                ratio = a.rps / b.rps if b.rps else float("nan")
                print(f"{arm + ' / ' + base:<26} {workload:>9} {concurrency:>4} {cpu:>18} "
                      f"{added:>12} {ratio:>9.3f}")
