"""From BFCL CaseRecords to the summary the report prints and `summary.json` stores. No I/O."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from bench.stats import bfcl
from bench.stats.analysis import PairedEffect, Rate, p_rounded, rounded
from bench.stats.bfcl_faults import bfcl_fault_summary
from bench.stats.bfcl_records import BFCL_ARMS, CaseRecord
from bench.stats.bfcl_trajectory import trajectories

IRRELEVANCE = "irrelevance"
OBSERVE = "off"  # the arm where nothing is repaired: damage and channels are read there


def _rate(rate: Rate) -> dict[str, Any]:
    return {"correct": rate.successes, "n": rate.n, "rate": rounded(rate.value),
            "low": rounded(rate.low), "high": rounded(rate.high)}


def _effect(effect: PairedEffect | None) -> dict[str, Any] | None:
    if effect is None:
        return None
    return {"mean": rounded(effect.difference), "low": rounded(effect.low),
            "high": rounded(effect.high), "pairs": effect.pairs}


def _paired(p: bfcl.Paired) -> dict[str, Any]:
    return {"pairs": p.pairs, "baseline_correct": p.baseline_correct,
            "treated_correct": p.treated_correct, "difference": rounded(p.difference),
            "p_value": p_rounded(p.p_value), "fixed": list(p.fixed), "broken": list(p.broken)}


def _groups(records: Sequence[CaseRecord]) -> dict[tuple[str, str, str], list[CaseRecord]]:
    """(cell, arm, category) → records."""
    groups: dict[tuple[str, str, str], list[CaseRecord]] = defaultdict(list)
    for record in records:
        groups[record.cell, record.arm, record.category].append(record)
    return dict(groups)


def _by_cell(records: Sequence[CaseRecord], cell: str, arm: str) -> list[CaseRecord]:
    return [r for r in records if r.cell == cell and r.arm == arm]


def summarise(records: Sequence[CaseRecord]) -> dict[str, Any]:
    groups = _groups(records)
    categories = list(dict.fromkeys(r.category for r in records))
    meta = {r.cell: r for r in records}
    cells = sorted(meta, key=lambda c: (meta[c].model, not meta[c].reference, c))
    arms = [a for a in BFCL_ARMS if any(r.arm == a for r in records)]
    references = {meta[c].model: c for c in cells if meta[c].reference}
    summary: dict[str, Any] = {
        "simulated": any(r.simulated for r in records), "cases": len(records),
        "categories": categories, "cells": cells, "arms": arms,
        "labels": {c: meta[c].precision for c in cells},
        "references": {c: references.get(meta[c].model) for c in cells},
        "sample": {cat: max((len(g) for (_, _, k), g in groups.items() if k == cat), default=0)
                   for cat in categories},
        "accuracy": {cat: {c: {a: _rate(bfcl.accuracy(groups[c, a, cat]))
                               for a in arms if (c, a, cat) in groups} for c in cells}
                     for cat in categories},
        "overall": {c: {a: _rate(bfcl.accuracy(_by_cell(records, c, a))) for a in arms
                        if _by_cell(records, c, a)} for c in cells},
        "inference_errors": {c: {a: sum(r.inference_error for r in _by_cell(records, c, a))
                                 for a in arms} for c in cells},
        "error_types": {c: {a: dict(Counter(r.error_type for r in _by_cell(records, c, a)
                                            if r.error_type).most_common())
                            for a in arms} for c in cells},
    }
    summary["repair"] = _repair(groups, cells, categories)
    summary["channels"] = {c: {a: _channels(bfcl.channel_rates(_by_cell(records, c, a)))
                               for a in arms if _by_cell(records, c, a)} for c in cells}
    summary.update(_precision_effects(records, groups, cells, categories, meta, references))
    summary["irrelevance"] = {
        c: summary["repair"][c][IRRELEVANCE] | {
            "verdict": _never_worse(summary["repair"][c][IRRELEVANCE])}
        for c in cells if IRRELEVANCE in summary["repair"].get(c, {})}
    summary["cost"] = {c: _cost(_by_cell(records, c, "off"), _by_cell(records, c, "on"))
                       for c in cells if _by_cell(records, c, "on")}
    summary["shared_first_answers"] = {
        c: sum(r.first_answers_shared for r in _by_cell(records, c, "on")) for c in cells}
    summary["trajectories"] = trajectories(records)  # multi-turn: loops and their cost
    summary["agreement"] = {c: _rate(bfcl.untouched_agreement(_by_cell(records, c, "off"),
                                                              _by_cell(records, c, "on")))
                            for c in cells if _by_cell(records, c, "off")
                            and _by_cell(records, c, "on")}
    summary["faults"] = bfcl_fault_summary(records)  # {} without an INJECTED-faults cell
    return summary


def _channels(rates: bfcl.ChannelRates) -> dict[str, Any]:
    return {"entries": rates.entries, "requests": rates.requests, "cases": rates.cases,
            "per_entry": {ch: rounded(rates.per_entry(ch)) for ch in bfcl.CHANNELS},
            "per_case": {ch: rounded(rates.per_case(ch)) for ch in bfcl.CHANNELS},
            "counts": {ch: rates.counts.get(ch, 0) for ch in bfcl.CHANNELS}}


def _repair(groups: dict[tuple[str, str, str], list[CaseRecord]], cells: list[str],
            categories: list[str]) -> dict[str, Any]:
    """On against off per cell and category: exact McNemar, Holm across categories."""
    out: dict[str, Any] = {}
    for cell in cells:
        compared = {cat: bfcl.paired(groups[cell, "off", cat], groups[cell, "on", cat])
                    for cat in categories
                    if (cell, "off", cat) in groups and (cell, "on", cat) in groups}
        adjusted = bfcl.holm({cat: p.p_value for cat, p in compared.items()})
        if compared:
            out[cell] = {cat: _paired(p) | {"holm_p": p_rounded(adjusted[cat])}
                         for cat, p in compared.items()}
    return out


def _never_worse(entry: dict[str, Any]) -> str:
    if entry["treated_correct"] < entry["baseline_correct"]:
        return "WORSE with repair on"
    if entry["treated_correct"] > entry["baseline_correct"]:
        return "better with repair on"
    return "equal"


def _cost(off: list[CaseRecord], on: list[CaseRecord]) -> dict[str, Any]:
    extra = bfcl.per_case_mean([float(r.extra_upstream_calls) for r in on])
    requests = bfcl.per_case_mean([float(r.requests) for r in on])
    return {"cases": len(on), "extra_upstream_calls": sum(r.extra_upstream_calls for r in on),
            "extra_calls_per_case": _effect(extra), "requests_per_case": _effect(requests),
            "cases_with_extra_calls": sum(1 for r in on if r.extra_upstream_calls),
            "on_minus_off": {k: _effect(v) for k, v in bfcl.token_cost(off, on).items()},
            "outcomes": dict(sorted(sum((Counter(r.outcomes) for r in on), Counter()).items()))}


def _precision_effects(records: Sequence[CaseRecord],
                       groups: dict[tuple[str, str, str], list[CaseRecord]], cells: list[str],
                       categories: list[str], meta: dict[str, CaseRecord],
                       references: dict[str, str]) -> dict[str, Any]:
    """Amplification, wrong names and damage: each lower cell against its model's
    reference, in the observe arm; then repair's recovery on damaged and undamaged ones."""
    amplification: dict[str, Any] = {}
    names: dict[str, Any] = {}
    pairs = {}
    for cell in cells:
        ref = references.get(meta[cell].model)
        if ref is None or ref == cell:
            continue
        ref_cases, low_cases = _by_cell(records, ref, OBSERVE), _by_cell(records, cell, OBSERVE)
        if not ref_cases or not low_cases:
            continue
        amplification[cell] = {"reference": ref, "channels": {}}
        for channel in bfcl.CHANNELS:
            ratio = bfcl.amplification(ref_cases, low_cases, channel)
            amplification[cell]["channels"][channel] = {
                "ratio": rounded(ratio.value), "low": rounded(ratio.low),
                "high": rounded(ratio.high), "reference_count": ratio.reference_count,
                "lower_count": ratio.lower_count}
        overlap = bfcl.names_overlap(ref_cases, low_cases)
        names[cell] = {"reference": ref, "spearman": rounded(overlap.spearman),
                       "p_value": p_rounded(overlap.p_value), "names": overlap.names,
                       "lower_hallucinations": overlap.lower_total,
                       "lower_new": overlap.lower_new, "share_new": rounded(overlap.share_new),
                       "reference_counts": dict(bfcl.wrong_names(ref_cases)),
                       "lower_counts": dict(bfcl.wrong_names(low_cases))}
        for cat in categories:
            if (ref, OBSERVE, cat) in groups and (cell, OBSERVE, cat) in groups:
                pairs[cell, cat] = (groups[ref, OBSERVE, cat], groups[cell, OBSERVE, cat])
    tests = bfcl.damage_tests(pairs)
    damaged_pairs = {(t.cell, t.category) for t in tests if t.damaged}
    recovery: dict[str, Any] = {}
    for label, wanted in (("damaged", True), ("undamaged", False)):
        fixed = broken = n = 0
        for cell in cells:
            for cat in categories:
                if ((cell, cat) in damaged_pairs) != wanted:
                    continue
                if (cell, "off", cat) in groups and (cell, "on", cat) in groups:
                    p = bfcl.paired(groups[cell, "off", cat], groups[cell, "on", cat])
                    fixed, broken, n = fixed + len(p.fixed), broken + len(p.broken), n + p.pairs
        recovery[label] = {"pairs": n, "fixed": fixed, "broken": broken,
                           "difference": rounded((fixed - broken) / n if n else math.nan)}
    return {
        "amplification": amplification, "hallucinated_names": names,
        "damage": [{"cell": t.cell, "category": t.category,
                    "reference_correct": t.comparison.baseline_correct,
                    "lower_correct": t.comparison.treated_correct, "pairs": t.comparison.pairs,
                    "lost": len(t.comparison.broken), "won": len(t.comparison.fixed),
                    "p_value": p_rounded(t.p_value), "holm_p": p_rounded(t.adjusted),
                    "damaged": t.damaged} for t in tests],
        "damaged_cells": {c: any(t.damaged for t in tests if t.cell == c)
                          for c in sorted({t.cell for t in tests})},
        "recovery": recovery,
    }
