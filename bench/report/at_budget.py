"""`python -m bench.report.at_budget RUN_K10 RUN_K3`: the three arms at a small K, from two runs.

The `on+budget` arm depends on K (the agent tells reflexguard), so it must run at the
small K itself. `off` and `on` do not: reflexguard never learns K there, and tau2 only
stops an episode at its K-th error, so their success and spending at K' <= K are
recomputed exactly from the run at K (the same rule as the report's success at every K).
Prints one markdown table per cell: each row says which run it comes from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.record_store import RecordStore
from bench.records import EpisodeRecord
from bench.report.writer import run_budget
from bench.stats import analysis

INDEPENDENT_OF_K = ("off", "on")


def _row(label: str, source: str, records: list[EpisodeRecord], budget: int,
         recompute: bool) -> str:
    curve = analysis.success_curve(records, budget)
    cells = []
    for k in range(1, budget + 1):
        rate = curve[k]
        cells.append("–" if not rate.n else
                     f"{rate.successes}/{rate.n} [{100 * rate.low:.0f}–{100 * rate.high:.0f}%]")
    spent = analysis.budget_spent(records, budget if recompute else None)
    distribution = ", ".join(f"{e}: {c}" for e, c in spent.distribution.items())
    low = sum(analysis.low_budget_turns(r, budget) > 0 for r in records)
    return (f"| {label} | {source} | " + " | ".join(cells) + f" | {spent.mean:.2f} "
            f"[{spent.low:.2f}, {spent.high:.2f}] | {distribution} | {spent.exhausted} | "
            f"{low} |")


def table(large: list[EpisodeRecord], small: list[EpisodeRecord], small_k: int,
          large_name: str, small_name: str) -> list[str]:
    lines: list[str] = []
    for cell in sorted({r.cell.key for r in small if r.arm == "on+budget"}):
        lines += [f"**{cell}**, K={small_k}", "",
                  "| arm | from | " + " | ".join(f"success K={k}" for k in range(1, small_k + 1))
                  + " | errors spent, mean [95% CI] | distribution | spent all K | "
                  "reached ≤2 left |", "|" + "---|" * (small_k + 6)]
        for arm in INDEPENDENT_OF_K:
            group = [r for r in large if r.cell.key == cell and r.arm == arm]
            if group:
                lines.append(_row(arm, f"{large_name}, recomputed at K={small_k}", group,
                                  small_k, recompute=True))
        group = [r for r in small if r.cell.key == cell and r.arm == "on+budget"]
        lines.append(_row("on+budget", f"{small_name}, run at K={small_k}", group, small_k,
                          recompute=False))
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("large", type=Path, help="the run at the larger K, e.g. K=10")
    parser.add_argument("small", type=Path, help="the run at the smaller K, with on+budget")
    args = parser.parse_args()
    large = RecordStore(args.large / "episodes.jsonl").load()
    small = RecordStore(args.small / "episodes.jsonl").load()
    if not large or not small:
        print("bench.report.at_budget: error: no episodes in one of the runs", file=sys.stderr)
        sys.exit(2)
    large_k, small_k = run_budget(large, None), run_budget(small, None)
    if small_k > large_k:
        print(f"bench.report.at_budget: error: K={small_k} is above the first run's "
              f"K={large_k}", file=sys.stderr)
        sys.exit(2)
    print("\n".join(table(large, small, small_k, str(args.large), str(args.small))))


if __name__ == "__main__":
    main()
