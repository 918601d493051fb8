"""`reflexguard model fetch | quantize | list`."""

from __future__ import annotations

import argparse

from reflexguard.embedded import store


def run(args: argparse.Namespace) -> int:
    from reflexguard.cli import CliError

    try:
        if args.action == "fetch":
            path = store.fetch()
            print(f"Q4_K_M as shipped: {path}")
        elif args.action == "quantize":
            path = store.quantize(args.to)
            print(f"{store.variant(args.to).label}: {path}")
        else:
            for row in store.listing():
                size = f"{int(row['size']) / 1e6:.0f} MB" if row["size"] else "-"  # type: ignore[call-overload]
                sha = str(row["sha256"] or "-")[:16]
                state = "cached" if row["cached"] else "not cached"
                print(f"{row['variant']:<7} {state:<11} {size:>7}  sha256 {sha}  {row['label']}")
    except (store.ModelError, ValueError) as exc:
        raise CliError(str(exc)) from None
    return 0
