"""BFCL under injected faults: what the real model repairs into a correct answer. No I/O.

For each INJECTED-faults cell (`<precision>+inject:SPEC`, bench/tau2/fault_cells.py) and
category, the cases are paired off/on by id. A case is *injected* when reflexguard put a
fault on a first answer of it (the same fault in both arms: the draw is seeded by the
request); per channel, the share whose on-arm answer BFCL's checker accepts is what
repair recovered. Beside it, the same share for cases whose first answer erred by the
model's own doing (natural), in the injected cell and in its natural cell, and the cases
repair broke (right with repair off, wrong with it on).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from bench.fault_tally import is_injected_label
from bench.stats.analysis import wilson
from bench.stats.bfcl_records import CaseRecord


def _rate(successes: int, n: int) -> dict[str, Any]:
    rate = wilson(successes, n)
    return {"successes": successes, "n": n, "rate": successes / n if n else None,
            "low": rate.low if n else None, "high": rate.high if n else None}


def _first_injected(record: CaseRecord) -> str | None:
    tally = record.injected
    if tally is None or not tally.first:
        return None
    return sorted(tally.first)[0] if len(tally.first) == 1 else "mixed"


def _natural(record: CaseRecord) -> bool:
    """The first answers erred by the model's own doing (an invalid call not injected)."""
    if record.injected is not None:
        return bool(record.injected.natural_first)
    return any(c != "ok" for c in record.first_attempt_channels)


def _pairs(records: Sequence[CaseRecord], cell: str,
           category: str) -> list[tuple[CaseRecord, CaseRecord]]:
    off = {r.case_id: r for r in records if r.cell == cell and r.category == category
           and r.arm == "off"}
    on = {r.case_id: r for r in records if r.cell == cell and r.category == category
          and r.arm == "on"}
    return [(off[i], on[i]) for i in sorted(off) if i in on]


def _repair_to_correct(pairs: list[tuple[CaseRecord, CaseRecord]]) -> dict[str, Any]:
    by_channel: dict[str, list[bool]] = defaultdict(list)
    natural: list[bool] = []
    broken_injected = broken_clean = fixed = 0
    for off, on in pairs:
        channel = _first_injected(off)
        if channel is not None:
            by_channel[channel].append(on.correct)
            by_channel["any"].append(on.correct)
        elif _natural(off):
            natural.append(on.correct)
        if off.correct and not on.correct:
            if channel is not None:
                broken_injected += 1
            else:
                broken_clean += 1
        if on.correct and not off.correct:
            fixed += 1
    return {
        "pairs": len(pairs),
        "injected_cases": len(by_channel.get("any", [])),
        "injected_repaired_correct": {c: _rate(sum(v), len(v)) for c, v in
                                      sorted(by_channel.items())},
        "natural_repaired_correct": _rate(sum(natural), len(natural)),
        "off_correct": _rate(sum(o.correct for o, _ in pairs), len(pairs)),
        "on_correct": _rate(sum(n.correct for _, n in pairs), len(pairs)),
        "fixed": fixed, "broken_with_injected_fault": broken_injected,
        "broken_without": broken_clean,
    }


def bfcl_fault_summary(records: Sequence[CaseRecord]) -> dict[str, Any]:
    """Per injected cell and category (and its natural cell beside it); {} without any."""
    injected_cells = sorted({r.cell for r in records if is_injected_label(r.precision)})
    if not injected_cells:
        return {}
    categories = list(dict.fromkeys(r.category for r in records))
    out: dict[str, Any] = {}
    for cell in injected_cells:
        natural = cell.split("+inject:", 1)[0]
        rows = {}
        for category in categories:
            pairs = _pairs(records, cell, category)
            if not pairs:
                continue
            base = _pairs(records, natural, category)
            rows[category] = {"injected_cell": _repair_to_correct(pairs),
                              "natural_cell": _repair_to_correct(base) if base else None}
        out[cell] = {"natural": natural, "categories": rows}
    return out
