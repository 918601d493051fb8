"""`reflexguard model fetch | quantize | list | doctor`. An I/O edge: it prints."""

from __future__ import annotations

import argparse

from reflexguard.cli.errors import CliError
from reflexguard.embedded import model_store
from reflexguard.embedded.variants import variant


def run_model_command(args: argparse.Namespace) -> int:

    if args.action == "doctor":
        from reflexguard.embedded import doctor

        return doctor.run()
    try:
        if args.action == "fetch":
            path = model_store.fetch()
            print(f"Q4_K_M as shipped: {path}")
        elif args.action == "quantize":
            path = model_store.quantize(args.to)
            print(f"{variant(args.to).label}: {path}")
        else:
            for row in model_store.listing():
                size = f"{row.size / 1e6:.0f} MB" if row.size else "-"
                state = "cached" if row.size else "not cached"
                sha = (row.sha256 or "-")[:16]
                print(f"{row.variant:<7} {state:<11} {size:>7}  sha256 {sha}  {row.label}")
    except (model_store.ModelError, ValueError) as exc:
        raise CliError(str(exc)) from None
    return 0
