"""`python -m bench.margins`: teacher-forced next-call decisions at three precisions.

Every gold step of tau2's mock, retail and telecom (solo) tasks is asked of the embedded
Qwen2.5-Coder-0.5B at Q4_K_M (reference), Q3_K_S and Q2_K, greedy, with top-5 logprobs;
the report lands in runs/margins/NAME. See docs/margins.md.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import NoReturn

from bench.margins.runner import (
    ALL_DOMAINS,
    DEFAULT_TASKS,
    DOMAINS,
    MAX_TOKENS,
    N_CTX,
    THREADS,
    VARIANTS,
)
from reflexguard.ops.oneline import OneLineParser


def parser() -> OneLineParser:
    p = OneLineParser(prog="bench.margins", description=__doc__)
    p.add_argument("--domains", nargs="+", default=list(DOMAINS), choices=ALL_DOMAINS,
                   help="tau2's mock, retail, telecom (default), or BFCL's bfcl_multiple "
                        "and bfcl_parallel_multiple (one decision per case, the BFCL bench's "
                        "seeded sample; needs .venv-bfcl)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                   help="precisions, asked in this order; Q4_K_M is the reference")
    p.add_argument("--tasks", type=int, default=None,
                   help="the first N tasks of each domain (default: "
                        + ", ".join(f"{d} {n}" for d, n in DEFAULT_TASKS.items())
                        + "; every case of a BFCL domain)")
    p.add_argument("--out", type=Path, default=None, help="default: runs/margins/<timestamp>")
    p.add_argument("--resume", action="store_true", help="skip the decisions already recorded")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    p.add_argument("--n-ctx", type=int, default=N_CTX)
    p.add_argument("--threads", type=int, default=THREADS,
                   help=f"llama.cpp threads (default {THREADS}: see runner.THREADS)")
    p.add_argument("--report-only", action="store_true",
                   help="rebuild the report from the decisions already recorded")
    return p


def _fail(message: str) -> NoReturn:
    print(f"bench.margins: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    for name, value in (("--tasks", args.tasks), ("--max-tokens", args.max_tokens),
                        ("--n-ctx", args.n_ctx), ("--threads", args.threads)):
        if value is not None and value < 1:
            _fail(f"{name} must be at least 1")
    from bench.margins.report import build_report
    from bench.margins.runner import StudyError, StudyOptions, run
    from reflexguard.embedded.lifetime import Terminated, sigterm_as_interrupt

    out = args.out or Path("runs/margins") / time.strftime("%Y%m%d-%H%M%S")
    command = "python -m bench.margins " + shlex.join(argv if argv is not None
                                                      else sys.argv[1:])
    if args.report_only:
        if not (out / "decisions.jsonl").exists():
            _fail(f"no decisions recorded in {out}")
        build_report(out, command)
        print(f"report: {out / 'report.md'}")
        return
    options = StudyOptions(out=out, domains=args.domains, variants=args.variants,
                           tasks=args.tasks, resume=args.resume, max_tokens=args.max_tokens,
                           n_ctx=args.n_ctx, threads=args.threads, command=command)
    sigterm_as_interrupt()
    try:
        run(options)
    except StudyError as exc:
        _fail(str(exc))
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted; recorded decisions are saved: rerun with --resume --out {out}",
              file=sys.stderr)
        sys.exit(143 if isinstance(exc, Terminated) else 130)
    build_report(out, command)
    print(f"report: {out / 'report.md'}")


if __name__ == "__main__":
    main()
