"""`python -m bench.capacity`: concurrent paced streams per core, reflexguard against the
minimal pass-through (issue 34; docs/performance.md, "Capacity").

A production server streams each answer at 20-60 events a second; what a proxy costs
there is how many such streams one core carries before the agent feels it. This starts
the streaming fake upstream (simulated, `--gap-ms` between events), the minimal aiohttp
pass-through and `reflexguard serve`, each with 1 and N workers, and K load processes
holding c streams open, and prints the added first text byte and a held call's hold
(p50/p99) at each c, the CPU per stream, and the most streams per core within 10 ms of
added p99. Only ratios of one run mean anything on a shared machine; nothing is asserted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.perf.capacity import Options, measure, write_json
from bench.perf.capacity_report import print_report
from reflexguard.ops.oneline import OneLineParser


def main(argv: list[str] | None = None) -> None:
    cores = os.cpu_count() or 2
    p = OneLineParser(prog="bench.capacity", description=__doc__)
    p.add_argument("--workers", type=int, nargs="+", default=[1],
                   help="worker counts, each against the minimal with as many processes")
    p.add_argument("--concurrency", type=int, nargs="+", default=[50, 200, 1000])
    p.add_argument("--scenes", nargs="+", choices=["text", "call"], default=["text", "call"])
    p.add_argument("--gap-ms", type=float, default=25.0,
                   help="the upstream's pause between events (25: 40 events/s per stream)")
    p.add_argument("--warm", type=float, default=1.0, metavar="SECONDS",
                   help="per point, before streams are recorded")
    p.add_argument("--duration", type=float, default=8.0, metavar="SECONDS",
                   help="per point and round, after the warm-up")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--load-processes", type=int, default=max(1, cores // 4), metavar="K")
    p.add_argument("--upstream-processes", type=int, default=max(1, cores // 4), metavar="U")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write every point here")
    args = p.parse_args(argv)
    if any(c < 1 for c in args.concurrency) or any(n < 1 for n in args.workers):
        p.error("--concurrency and --workers take positive integers")
    options = Options(sorted(set(args.workers)), sorted(set(args.concurrency)), args.scenes,
                      args.gap_ms, args.warm, args.duration, args.rounds,
                      args.load_processes, args.upstream_processes)
    print(f"reflexguard capacity benchmark: {cores} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; upstream SIMULATED (paced SSE, "
          f"{args.gap_ms} ms between events, {args.upstream_processes} processes); "
          f"{args.load_processes} load processes; {args.warm} s warm-up + {args.duration} s "
          f"per point, {args.rounds} round(s)", flush=True)
    try:
        points = measure(options)
    except RuntimeError as exc:
        print(f"bench.capacity: {exc}", file=sys.stderr)
        sys.exit(1)
    print_report(points, args.gap_ms)
    if args.json:
        write_json(points, options, args.json)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
