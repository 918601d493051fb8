"""`python -m bench.bfcl`: BFCL through reflexguard, with BFCL's own handler and checker.

Default: the embedded Qwen2.5-Coder-0.5B at Q4_K_M (reference) and Q2_K (requantized),
repair off (observe: text calls lifted) and on, BFCL's non-live categories
simple_python, multiple, parallel, parallel_multiple, irrelevance, multi_turn_base and
multi_turn_miss_func, a fixed seeded sample of --limit cases each. The report lands in
OUT (report.md, report.html, PNG plots); `python -m bench.bfcl.report OUT` rebuilds it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from bench.bfcl.categories import DEFAULT_CATEGORIES, DEFAULT_SEED, CategoryError, check_categories
from bench.bfcl.runner import GENERATION_CAP
from bench.stats.bfcl_records import BFCL_ARMS, DEFAULT_ARMS, BfclArm
from reflexguard.embedded.lifetime import Terminated, sigterm_as_interrupt
from reflexguard.ops.oneline import OneLineParser

PROG = "bench.bfcl"


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description=__doc__)
    p.add_argument("--categories", nargs="+", default=list(DEFAULT_CATEGORIES),
                   help="BFCL categories (live_* are reserved and refused)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="a fixed seeded sample of N cases per category (default: all)")
    p.add_argument("--multi-turn-limit", type=int, default=None, metavar="N",
                   help="the sample for multi_turn_* categories (default: --limit); a "
                        "multi-turn case is many requests with long tool lists")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the sample's seed")
    p.add_argument("--cells", default=None, metavar="PRECISIONS|cells.yaml",
                   help="embedded precisions, comma-separated (default Q4_K_M,Q2_K), or a "
                        "cells.yaml (bench.compare's format)")
    p.add_argument("--arms", nargs="+", choices=list(BFCL_ARMS), default=list(DEFAULT_ARMS),
                   help="off (observe), on (the ladder), on+loop (the ladder and "
                        "loop_guard: repair), on+stop (the ladder and loop_guard: stop); "
                        "default off on")
    p.add_argument("--out", type=Path, default=None, help="default: runs/bfcl-<timestamp>")
    p.add_argument("--resume", action="store_true",
                   help="continue OUT: BFCL skips saved cases, stored records stay")
    p.add_argument("--model-threads", type=int, default=None, metavar="N",
                   help="threads of each embedded llama.cpp server (default: every core)")
    p.add_argument("--parallel-cells", action="store_true",
                   help="run every precision at once, each with its own model server (on a "
                        "shared busy machine, more CPU share; on a quiet one, no gain)")
    p.add_argument("--generation-cap", type=int, default=GENERATION_CAP, metavar="TOKENS",
                   help="max_tokens the model server applies to a request without one "
                        f"(BFCL sends none; default {GENERATION_CAP})")
    p.add_argument("--share-first-answers", action="store_true",
                   help="answer the on arm's first attempt from the off arm's identical "
                        "request, where the stored records show 50+ independent cases "
                        "answered identically (greedy decoding); else both arms run")
    p.add_argument("--inject-faults", nargs="+", metavar="SPEC", default=[],
                   help="TESTING: beside the reference precision, one cell per SPEC whose "
                        "reflexguard damages tool calls at these rates (e.g. unknown_tool=0.2;"
                        " docs/bench.md, 'Injected faults'), served by the same model server")
    return p


def _fail(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    for name, value in (("--limit", args.limit), ("--multi-turn-limit", args.multi_turn_limit),
                        ("--model-threads", args.model_threads),
                        ("--generation-cap", args.generation_cap)):
        if value is not None and value < 1:
            _fail(f"{name} must be at least 1")
    try:
        categories = check_categories(args.categories)
    except CategoryError as exc:
        _fail(str(exc))
    from reflexguard.ops.telemetry import configure_logging

    configure_logging("warning")
    from bench.bfcl.cells import resolve_cells
    from bench.bfcl.harness import HarnessError
    from bench.bfcl.runner import BenchError, RunOptions, run
    from bench.report.bfcl_writer import build_bfcl_report

    try:
        config = resolve_cells(args.cells)
    except FileNotFoundError:
        _fail(f"cells file not found: {args.cells}")
    except (ValidationError, ValueError) as exc:
        _fail(f"invalid --cells {args.cells}: {str(exc).splitlines()[0]}")
    if args.inject_faults:
        from bench.tau2.fault_cells import FaultCellsError, with_fault_cells

        try:
            config = with_fault_cells(config, args.inject_faults)
        except FaultCellsError as exc:
            _fail(str(exc))
    out = args.out or Path("runs") / time.strftime("bfcl-%Y%m%d-%H%M%S")
    arms: list[BfclArm] = [a for a in BFCL_ARMS if a in args.arms]
    options = RunOptions(out=out, arms=arms, categories=categories, limit=args.limit,
                         multi_turn_limit=args.multi_turn_limit,
                         seed=args.seed, resume=args.resume, model_threads=args.model_threads,
                         generation_cap=args.generation_cap,
                         parallel_cells=args.parallel_cells,
                         share_first_answers=args.share_first_answers)
    sigterm_as_interrupt()  # `kill <pid>` stops BFCL and the llama.cpp children too
    started = time.monotonic()
    try:
        run(config, options)
        build_bfcl_report(out)
    except (BenchError, HarnessError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted; saved cases stay: rerun with --resume --out {out}",
              file=sys.stderr)
        sys.exit(143 if isinstance(exc, Terminated) else 130)
    minutes = (time.monotonic() - started) / 60
    print(f"report: {out / 'report.md'} ({minutes:.1f} min)")


if __name__ == "__main__":
    main()
