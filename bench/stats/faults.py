"""Injected faults beside natural errors, and the masking study's curves. No I/O.

A cell whose precision key carries `+inject:SPEC` ran with reflexguard damaging its
model's tool calls at SPEC's rates (bench/tau2/fault_cells.py); its natural cell is the same
precision without the suffix. Everything here keeps the two apart: faults reflexguard
injected (simulated damage) and errors the model made by itself (natural).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from bench.fault_tally import is_injected_label
from bench.records import EpisodeRecord
from bench.stats import analysis
from reflexguard.core.fault_spec import parse_fault_spec

MASKING_BUDGETS = (1, 2, 3, 5, 10)


def injected_rate(precision_key: str) -> float:
    """The total per-call fault rate of a cell's key (0 for a natural cell)."""
    if "+inject:" not in precision_key:
        return 0.0
    spec = parse_fault_spec(precision_key.split("+inject:", 1)[1])
    return 0.0 if spec is None else sum(rate for _, rate in spec.rates)


def fault_label(precision_key: str) -> str:
    """How the report names a cell's damage: `natural`, or `INJECTED` and its rates
    (`reasks=on` when re-asks were damaged too; the seed left out)."""
    if "+inject:" not in precision_key:
        return "natural"
    parts = [p for p in precision_key.split("+inject:", 1)[1].split(",")
             if not p.startswith("seed=") and p != "reasks=off"]
    return "INJECTED " + ",".join(parts)


def base_cell(key: str) -> str:
    """`model@Q4_K_M+inject:.../mock` -> `model@Q4_K_M/mock`: the natural cell of a key."""
    head, _, domain = key.rpartition("/")
    return f"{head.split('+inject:', 1)[0]}/{domain}"


def _tokens(record: EpisodeRecord) -> int:
    """Tokens tau2's agent messages report (what the client saw: every attempt summed)."""
    total = 0
    for message in (record.tau2.get("simulation") or {}).get("messages") or []:
        usage = message.get("usage") if isinstance(message, dict) else None
        if message.get("role") == "assistant" and isinstance(usage, dict):
            total += int(usage.get("prompt_tokens") or 0) + int(
                usage.get("completion_tokens") or 0)
    return total


def _mean(values: Sequence[float]) -> dict[str, Any]:
    spent = analysis.bootstrap_mean(values)
    if spent is None:
        return {"mean": None, "low": None, "high": None, "n": 0}
    return {"mean": round(spent.difference, 3), "low": round(spent.low, 3),
            "high": round(spent.high, 3), "n": len(values)}


def _group(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    first: Counter[str] = Counter()
    reasks: Counter[str] = Counter()
    natural: Counter[str] = Counter()
    requests = repaired = passed = 0
    env_injected = env_natural = infra_injected = infra_natural = 0
    for record in records:
        tally = record.proxy.injected
        if tally is not None:
            first.update(tally.first)
            reasks.update(tally.reasks)
            natural.update(tally.natural_first)
            requests += tally.requests
            repaired += tally.repaired
            passed += tally.passed_on
        else:  # records from before the tally: every first-answer error is natural
            natural.update({c: n for c, n in record.proxy.first_attempt_channels.items()
                            if c != "ok"})
        env_injected += sum(1 for c in record.calls if c.error and c.injected)
        env_natural += sum(1 for c in record.calls if c.error and not c.injected)
        if record.infrastructure_error is not None:
            broken = tally is not None and tally.passed_on_channels.get("malformed_args", 0)
            infra_injected += bool(broken)
            infra_natural += not broken
    rate = analysis.wilson(repaired, requests)
    return {
        "episodes": len(records), "injected_first": dict(first), "injected_reasks": dict(reasks),
        "natural_first": dict(natural), "injected_requests": requests, "repaired": repaired,
        "passed_on": passed,
        "repaired_share": {"rate": rate.value if requests else None, "low": rate.low,
                           "high": rate.high, "n": requests},
        "env_errors": {"injected": env_injected, "natural": env_natural},
        "infrastructure_errors": {"injected": infra_injected, "natural": infra_natural},
        "extra_upstream_calls": _mean([float(r.proxy.extra_upstream_calls) for r in records]),
        "tokens": _mean([float(_tokens(r)) for r in records]),
        "seconds": _mean([r.duration_s for r in records]),
    }


def fault_summary(records: Sequence[EpisodeRecord], max_errors: int) -> dict[str, Any]:
    """Per cell and arm, injected vs natural; per natural cell, success at every K for
    each injected rate (the masking) and repair's paired effect there. Empty without any
    injected cell."""
    if not any(is_injected_label(r.cell.precision) for r in records):
        return {}
    groups = analysis.group(records)
    cells: dict[str, Any] = defaultdict(dict)
    for (cell, arm), group in sorted(groups.items()):
        cells[cell][arm] = {**_group(group),
                            "rate": injected_rate(group[0].cell.precision_key),
                            "label": fault_label(group[0].cell.precision_key),
                            "injected_cell": is_injected_label(group[0].cell.precision)}
    masking: dict[str, Any] = defaultdict(lambda: defaultdict(dict))
    for (cell, arm), group in sorted(groups.items()):
        curve = analysis.success_curve(group, max_errors)
        key = group[0].cell.precision_key
        success = {str(k): {"successes": r.successes, "n": r.n,
                            "rate": r.value if r.n else None, "low": r.low, "high": r.high}
                   for k, r in curve.items()}
        masking[base_cell(cell)][arm][fault_label(key)] = {
            "cell": cell, "rate": injected_rate(key), "success": success}
    return {"cells": dict(cells), "masking": {k: dict(v) for k, v in masking.items()},
            "budgets": [k for k in MASKING_BUDGETS if k <= max_errors]}
