"""Multi-turn trajectories per cell and arm: what a loop costs. Nothing here does I/O.

BFCL scores a multi-turn case wrong in many ways; the loop guard (issue 32) is about one:
a turn the model never ends, which BFCL force-terminates at its step limit (its checker's
`multi_turn:force_terminated`, after which the case stops). So for each cell and arm, over
the multi-turn categories: accuracy, force-terminated cases (at most one turn per case),
guarded requests and input tokens per case (as the client was billed: reflexguard sums
every attempt's usage), extra upstream calls, and the loop guard's repeated calls by what it
did.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from bench.stats.bfcl_records import BFCL_ARMS, CaseRecord

MULTI_TURN = "multi_turn_"
FORCE_TERMINATED = "force_terminated"  # in the checker's error_type, inside `error`


def force_terminated(record: CaseRecord) -> bool:
    return FORCE_TERMINATED in (record.error_type or "") or FORCE_TERMINATED in record.error \
        or "force-terminated" in record.error


def trajectories(records: Sequence[CaseRecord]) -> dict[str, dict[str, dict[str, Any]]]:
    """{cell: {arm: figures}} over the multi-turn cases; empty without any."""
    groups: dict[tuple[str, str], list[CaseRecord]] = defaultdict(list)
    for record in records:
        if record.category.startswith(MULTI_TURN):
            groups[record.cell, record.arm].append(record)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (cell, arm), cases in sorted(groups.items(),
                                     key=lambda kv: (kv[0][0], BFCL_ARMS.index(kv[0][1]))):
        n = len(cases)
        repeated = sum((Counter(r.repeated_calls) for r in cases), Counter())
        out.setdefault(cell, {})[arm] = {
            "cases": n,
            "correct": sum(r.correct for r in cases),
            "force_terminated": sum(force_terminated(r) for r in cases),
            "requests_per_case": round(sum(r.requests for r in cases) / n, 2),
            "input_tokens_per_case": round(sum(r.input_tokens for r in cases) / n, 1),
            "extra_calls_per_case": round(sum(r.extra_upstream_calls for r in cases) / n, 2),
            "repeated_calls": dict(sorted(repeated.items())),
            "cases_with_repeats": sum(1 for r in cases if r.repeated_calls),
        }
    return out


def trajectory_table(summary: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The report's table (markdown lines), one row per cell and arm."""
    if not summary:
        return ["No multi-turn case was run.", ""]
    lines = ["| cell | arm | cases | correct | force-terminated | requests / case | "
             "input tokens / case | extra calls / case | repeated calls (loop guard) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cell, arms in summary.items():
        for arm, f in arms.items():
            repeats = ", ".join(f"{k} {v}" for k, v in f["repeated_calls"].items()) or "–"
            lines.append(f"| {cell.split('@', 1)[-1]} | {arm} | {f['cases']} | {f['correct']} | "
                         f"{f['force_terminated']} | {f['requests_per_case']} | "
                         f"{f['input_tokens_per_case']:,.0f} | {f['extra_calls_per_case']} | "
                         f"{repeats} |")
    return lines + [""]
