"""`python -m bench.compare`: tau2-bench episodes through reflexguard: repair off, on, on+budget.

Default: the embedded Qwen2.5-Coder-0.5B at Q4_K_M (reference) and Q2_K (requantized),
tau2's `mock` domain (all 9 tasks), all three arms (off, on, on+budget), one trial, K=10;
the report lands in runs/NAME. See docs/bench.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from bench.records import ARMS, Arm
from bench.tau2.cells import DOMAINS, load_cells, simulated_cells
from bench.tau2.limits import EPISODE_TIMEOUT_S, MAX_TOKENS
from reflexguard.embedded.lifetime import Terminated, sigterm_as_interrupt
from reflexguard.ops.oneline import OneLineParser

RETAIL_SUBSET = 5
SIMULATED_CHANNELS = ("unknown_tool", "argument_error")
# `both` keeps its meaning from before the budget arm existed: off and on, paired.
REPAIR_CHOICES: dict[str, list[Arm]] = {
    "off": ["off"], "on": ["on"], "on+budget": ["on+budget"], "on+stop": ["on+stop"],
    "both": ["off", "on"], "loop": ["on", "on+stop"],
    # on+stop is opt-in: the loop study's arm (issue 32), not the default job's.
    "all": [arm for arm in ARMS if arm != "on+stop"]}


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="bench.compare", description=__doc__)
    p.add_argument("--repair", choices=list(REPAIR_CHOICES), default="all",
                   help="arms: off, on, on+budget (repair on, budget K known to the proxy), "
                        "on+stop (repair on, loop_guard: stop), both (off and on), loop (on and "
                        "on+stop, paired) or all "
                        "(off, on and on+budget; default)")
    p.add_argument("--cells", type=Path, help="cells.yaml (default: the embedded model)")
    p.add_argument("--domains", nargs="+", default=["mock"], choices=DOMAINS)
    p.add_argument("--retail-subset", action="store_true",
                   help=f"also run retail's first {RETAIL_SUBSET} tasks")
    tasks = p.add_mutually_exclusive_group()
    tasks.add_argument("--tasks", type=int, help="the first N tasks of each domain (default all)")
    tasks.add_argument("--task-ids", nargs="+")
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--max-errors", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="default: runs/<timestamp>")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--episode-timeout", type=float, default=EPISODE_TIMEOUT_S, metavar="SECONDS",
                   help=f"wall-clock limit per episode, recorded as termination "
                        f"'episode_timeout' and counted as a failure; 0 = none "
                        f"(default {EPISODE_TIMEOUT_S:g})")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS,
                   help=f"max_tokens of every agent call (default {MAX_TOKENS})")
    p.add_argument("--model-threads", type=int, default=None, metavar="N",
                   help="threads of each embedded llama.cpp server (default: every core); "
                        "1 on a machine busy with other work: llama.cpp's threads "
                        "spin-wait for each other, which oversubscribed cores punish")
    p.add_argument("--margins", choices=["on", "off"], default="off",
                   help="every proxy asks the upstream for logprobs and writes logit margins "
                        "into its events (default off: llama-cpp-python's logprobs cost "
                        "about 8x the generation, docs/bench.md; turn it on with vLLM)")
    p.add_argument("--inject-faults", nargs="+", metavar="SPEC", default=[],
                   help="TESTING: beside each model's reference precision, one cell per SPEC "
                        "whose reflexguard damages tool calls at these rates (e.g. "
                        "unknown_tool=0.2 unknown_tool=0.4; docs/bench.md, 'Injected "
                        "faults'); the natural cell runs too; each trial draws its own faults")
    p.add_argument("--simulated-agent", metavar="ERRORS", default=None,
                   help="TEST ONLY: replay gold actions with these injected errors "
                        "(comma-separated: unknown_tool, argument_error); no model runs")
    return p


def _fail(message: str) -> NoReturn:
    print(f"bench.compare: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    for name, value in (("--tasks", args.tasks), ("--trials", args.trials),
                        ("--max-errors", args.max_errors), ("--concurrency", args.concurrency),
                        ("--max-tokens", args.max_tokens),
                        ("--model-threads", args.model_threads)):
        if value is not None and value < 1:
            _fail(f"{name} must be at least 1")
    if args.episode_timeout < 0:
        _fail("--episode-timeout must be 0 (none) or more")
    simulated = None
    if args.simulated_agent is not None:
        simulated = [c for c in args.simulated_agent.split(",") if c]
        unknown = [c for c in simulated if c not in SIMULATED_CHANNELS]
        if unknown:
            _fail(f"unknown simulated error channel(s): {', '.join(unknown)}")
    from reflexguard.ops.telemetry import configure_logging

    configure_logging("warning")
    from bench.report.writer import build_report
    from bench.tau2.runner import BenchError, RunOptions, run

    try:
        config = simulated_cells(simulated) if simulated is not None else load_cells(args.cells)
    except FileNotFoundError:
        _fail(f"cells file not found: {args.cells}")
    except (ValidationError, ValueError) as exc:
        _fail(f"invalid cells file {args.cells}: {str(exc).splitlines()[0]}")
    if args.inject_faults:
        from bench.tau2.fault_cells import FaultCellsError, with_fault_cells

        try:
            config = with_fault_cells(config, args.inject_faults)
        except FaultCellsError as exc:
            _fail(str(exc))
    domains = list(dict.fromkeys(args.domains + (["retail"] if args.retail_subset else [])))
    out = args.out or Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    options = RunOptions(
        out=out, arms=REPAIR_CHOICES[args.repair],
        domains=domains, tasks=args.tasks, task_ids=args.task_ids, trials=args.trials,
        max_errors=args.max_errors, concurrency=args.concurrency, resume=args.resume,
        domain_tasks={"retail": RETAIL_SUBSET} if args.retail_subset and not args.tasks else {},
        episode_timeout=args.episode_timeout or None, max_tokens=args.max_tokens,
        model_threads=args.model_threads, margins=args.margins == "on",
    )
    # `kill <pid>` must stop the llama.cpp children too: unwind like Ctrl-C.
    sigterm_as_interrupt()
    started = time.monotonic()
    try:
        run(config, options)
    except BenchError as exc:
        _fail(str(exc))
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted; finished episodes are saved: rerun with --resume --out {out}",
              file=sys.stderr)
        sys.exit(143 if isinstance(exc, Terminated) else 130)
    build_report(out, args.max_errors)
    minutes = (time.monotonic() - started) / 60
    label = " (SIMULATED agent)" if simulated is not None else ""
    print(f"report{label}: {out / 'report.md'} ({minutes:.1f} min)")


if __name__ == "__main__":
    main()
