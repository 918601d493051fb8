"""The capacity benchmark's reading (issue 34): what each proxy adds over direct at each
concurrency, its CPU per stream against the minimal's, and the most concurrent streams per
core before the added p99 first text byte passes the goal. Pure but for printing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.perf.capacity import Point
from bench.perf.stream_stats import quantile, ratio

GOAL_P99_MS = 10.0  # the added p99 first text byte a production user would still accept


@dataclass(frozen=True)
class Added:
    """One proxy's added latency over direct at one point, and its CPU per stream."""

    target: str
    kind: str
    workers: int
    c: int
    scene: str
    p50: float
    p99: float
    cpu_ms: float
    errors: int
    busy: float


def added(points: Sequence[Point]) -> list[Added]:
    """Each proxy point against direct's at the same concurrency and scene: first text
    byte for `text`, the hold for `call`."""
    direct = {(p.c, p.scene): p for p in points if p.kind == "direct"}
    rows = []
    for point in points:
        base = direct.get((point.c, point.scene))
        if point.kind == "direct" or base is None:
            continue
        what = "first_text_ms" if point.scene == "text" else "hold_ms"
        mine, theirs = getattr(point, what), getattr(base, what)
        rows.append(Added(
            point.target, point.kind, point.workers, point.c, point.scene,
            quantile(mine, 0.5) - quantile(theirs, 0.5),
            quantile(mine, 0.99) - quantile(theirs, 0.99),
            ratio(1e3 * point.cpu_s, point.streams), point.errors, point.busy))
    return rows


def streams_per_core(rows: Sequence[Added], kind: str, workers: int,
                     goal: float = GOAL_P99_MS) -> tuple[float, bool]:
    """The most concurrent streams per worker process whose added p99 first text byte
    stayed within `goal` (at the concurrencies measured), and whether every one measured
    did (then the capacity is at least that: the grid ended first). (0, False) when none
    did. Streams without errors only: a point with errors is over capacity too."""
    mine = sorted((r for r in rows if r.kind == kind and r.workers == workers
                   and r.scene == "text"), key=lambda r: r.c)
    within = [r for r in mine if r.p99 <= goal and r.errors == 0]
    if not within:
        return 0.0, False
    best = max(within, key=lambda r: r.c)
    return best.c / workers, len(within) == len(mine)


def print_report(points: Sequence[Point], gap_ms: float) -> None:
    rows = added(points)
    rate = 1000 / gap_ms if gap_ms > 0 else math.inf
    print(f"\nadded over direct, ms (text: first text byte; call: a ~2 KB call's hold); "
          f"streams paced at {rate:.0f} events/s; CPU: each server's own per stream")
    print(f"{'N':>2} {'c':>5} {'scene':<5} {'min +p50':>8} {'min +p99':>8} {'rg +p50':>8} "
          f"{'rg +p99':>8} {'min cpu':>7} {'rg cpu':>7} {'rg/min':>6} {'errors':>6} "
          f"{'busy':>5}")
    keyed = {(r.kind, r.workers, r.c, r.scene): r for r in rows}
    for n, c, scene in sorted({(r.workers, r.c, r.scene) for r in rows}):
        m, g = keyed.get(("minimal", n, c, scene)), keyed.get(("reflexguard", n, c, scene))
        if m is None or g is None:
            continue
        print(f"{n:>2} {c:>5} {scene:<5} {m.p50:>8.2f} {m.p99:>8.2f} {g.p50:>8.2f} "
              f"{g.p99:>8.2f} {m.cpu_ms:>7.2f} {g.cpu_ms:>7.2f} "
              f"{ratio(g.cpu_ms, m.cpu_ms):>6.2f} {m.errors + g.errors:>6} "
              f"{max(m.busy, g.busy):>5.0%}")
    print(f"\nmost concurrent streams per core with the added p99 first text byte within "
          f"{GOAL_P99_MS:g} ms (of the concurrencies measured; '>=' where every one was)")
    for n in sorted({r.workers for r in rows}):
        cells = []
        for kind in ("minimal", "reflexguard"):
            per_core, all_within = streams_per_core(rows, kind, n)
            cells.append(f"{kind} {'>=' if all_within else ''}{per_core:.0f}")
        print(f"N={n}: " + ", ".join(cells))
