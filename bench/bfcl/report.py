"""`python -m bench.bfcl.report RUN`: (re)build the BFCL report from `RUN/cases.jsonl` alone."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.report.bfcl_writer import build_bfcl_report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.bfcl.report", description=__doc__)
    parser.add_argument("run", type=Path, help="the run folder, e.g. runs/bfcl-default")
    args = parser.parse_args(argv)
    try:
        build_bfcl_report(args.run)
    except (FileNotFoundError, ValueError) as exc:
        print(f"bench.bfcl.report: error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"report written to {args.run / 'report.md'}")


if __name__ == "__main__":
    main()
