"""`bench.overhead --workers 1 2 4 8 --load-processes K`'s many-core table (issue 23): per
worker count N, req/s of the minimal pass-through (N processes) and of reflexguard (N
workers), their ratio, each one's scaling from the fewest N, and CPU ms per request; plus
the c=1 added p50 over direct. The rows are pure; printing and the JSON file are the edge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.perf.load import Point

Results = dict[tuple[str, str, int], Point]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def rows(results: Results, workload: str, c: int, workers: list[int]) -> list[dict[str, Any]]:
    """One row per N: both req/s, the ratio, each one's scaling from workers[0], CPU."""
    first = workers[0]
    base_min = results[f"minimal-{first}p", workload, c].rps
    base_rg = results[f"rg-{first}w", workload, c].rps
    out = []
    for n in workers:
        minimal, guard = results[f"minimal-{n}p", workload, c], results[f"rg-{n}w", workload, c]
        out.append({"n": n, "minimal_rps": minimal.rps, "rg_rps": guard.rps,
                    "ratio": _ratio(guard.rps, minimal.rps),
                    "minimal_scaling": _ratio(minimal.rps, base_min),
                    "rg_scaling": _ratio(guard.rps, base_rg),
                    "minimal_cpu_ms": minimal.cpu_ms_per_request,
                    "rg_cpu_ms": guard.cpu_ms_per_request,
                    "errors": minimal.errors + guard.errors})
    return out


def added_p50(results: Results, workload: str, workers: list[int]) -> dict[str, float] | None:
    """At c=1, one process each: what the minimal and reflexguard add over direct, p50 ms."""
    if ("direct", workload, 1) not in results:
        return None
    direct = results["direct", workload, 1].quantile(0.5)
    n = workers[0]
    minimal = results[f"minimal-{n}p", workload, 1].quantile(0.5) - direct
    guard = results[f"rg-{n}w", workload, 1].quantile(0.5) - direct
    return {"minimal": minimal, "rg": guard, "ratio": _ratio(guard, minimal)}


def summary(results: Results, workloads: list[str], concurrencies: list[int],
            workers: list[int]) -> dict[str, Any]:
    c = max(concurrencies)
    out: dict[str, Any] = {}
    for workload in workloads:
        table = rows(results, workload, c, workers)
        print(f"\nmany cores, workload {workload}, c={c}:")
        print(f"{'N':>3} {'min req/s':>10} {'rg req/s':>10} {'rg/min':>7} {'min scale':>9} "
              f"{'rg scale':>9} {'min cpu ms':>10} {'rg cpu ms':>10} {'errors':>6}")
        for r in table:
            print(f"{r['n']:>3} {r['minimal_rps']:>10.0f} {r['rg_rps']:>10.0f} "
                  f"{r['ratio']:>7.2f} {r['minimal_scaling']:>9.2f} {r['rg_scaling']:>9.2f} "
                  f"{r['minimal_cpu_ms'] or float('nan'):>10.3f} "
                  f"{r['rg_cpu_ms'] or float('nan'):>10.3f} {r['errors']:>6}")
        added = added_p50(results, workload, workers)
        if added:
            print(f"c=1 added p50 over direct: minimal {added['minimal']:.3f} ms, reflexguard "
                  f"{added['rg']:.3f} ms ({added['ratio']:.2f}x)")
        out[workload] = {"c": c, "rows": table, "c1_added_p50_ms": added}
    return out


def write_json(path: Path, results: Results, workers: list[int], table: dict[str, Any],
               ) -> None:
    points = [{"target": t, "workload": w, "c": c, "p50_ms": p.quantile(0.5),
               "p99_ms": p.quantile(0.99), "rps": p.rps, "requests": len(p.latencies),
               "errors": p.errors, "cpu_ms_per_request": p.cpu_ms_per_request}
              for (t, w, c), p in results.items()]
    path.write_text(json.dumps({"workers": workers, "summary": table, "points": points},
                               indent=1))
