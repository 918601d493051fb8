"""From records to the summary the report prints and `summary.json` stores. No I/O."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bench.records import ARMS, ENV_CHANNELS, EpisodeRecord
from bench.stats import analysis
from bench.stats.analysis import rounded
from bench.stats.faults import fault_summary
from reflexguard.core.channels import ERROR_CHANNELS

REPORT_BUDGETS = (1, 2, 3, 5, 10)
# Paired comparisons (treated, baseline): what repair adds, what the budget adds to repair.
ARM_COMPARISONS = (("on", "off"), ("on+budget", "off"), ("on+budget", "on"), ("on+stop", "off"),
                   ("on+stop", "on"))


def _rate(rate: analysis.Rate) -> dict[str, Any]:
    return {"successes": rate.successes, "n": rate.n, "rate": rounded(rate.value),
            "low": rounded(rate.low), "high": rounded(rate.high)}


def _channels(rates: analysis.ChannelRates, channels: tuple[str, ...]) -> dict[str, Any]:
    return {"calls": rates.calls, "episodes": rates.episodes,
            "mean_agent_turns": round(rates.mean_turns, 2),
            "per_call": {c: rounded(rates.per_call(c)) for c in channels},
            "per_episode": {c: rounded(rates.per_episode(c)) for c in channels},
            "counts": {c: rates.counts.get(c, 0) for c in channels}}


def summarise(records: list[EpisodeRecord], max_errors: int) -> dict[str, Any]:
    groups = analysis.group(records)
    cells = {r.cell.key: r.cell for r in records}
    model_channels = tuple(str(c) for c in ERROR_CHANNELS)
    summary: dict[str, Any] = {
        "simulated": any(r.simulated for r in records),
        "episodes": len(records),
        "users": sorted({r.user for r in records}),
        "judges": sorted({r.judge for r in records}),
        "unscored_tasks": sorted({r.task_id for r in records if r.unscored}),
        "cells": {k: c.model_dump() for k, c in cells.items()},
        "success_at_k": defaultdict(dict), "env_channels": defaultdict(dict),
        "model_channels": defaultdict(dict), "recovery": defaultdict(dict),
        "repairs": defaultdict(dict), "termination": defaultdict(dict),
        "max_errors": max_errors,
        "arms": [arm for arm in ARMS if any(r.arm == arm for r in records)],
        "budget_spent": defaultdict(dict), "outcomes": defaultdict(dict),
        "events_files": defaultdict(dict),
    }
    for (cell, arm), group in sorted(groups.items()):
        curve = analysis.success_curve(group, max_errors)
        summary["success_at_k"][cell][arm] = {k: _rate(r) for k, r in curve.items()}
        summary["env_channels"][cell][arm] = _channels(analysis.env_channel_rates(group),
                                                       ENV_CHANNELS)
        summary["model_channels"][cell][arm] = _channels(analysis.model_channel_rates(group),
                                                         model_channels)
        summary["recovery"][cell][arm] = _rate(analysis.recovery(group))
        summary["repairs"][cell][arm] = {
            "attempted": sum(r.proxy.repairs_attempted for r in group),
            "succeeded": sum(r.proxy.repairs_succeeded for r in group),
            "extra_upstream_calls": sum(r.proxy.extra_upstream_calls for r in group)}
        reasons: dict[str, int] = defaultdict(int)
        for record in group:
            reasons[record.termination_reason] += 1
        summary["termination"][cell][arm] = dict(reasons)
        spent = analysis.budget_spent(group)
        summary["budget_spent"][cell][arm] = {
            "n": spent.n, "mean": rounded(spent.mean), "low": rounded(spent.low),
            "high": rounded(spent.high), "median": rounded(spent.median),
            "distribution": spent.distribution, "exhausted": spent.exhausted,
            "low_budget_episodes": sum(
                analysis.low_budget_turns(r, r.max_errors or max_errors) > 0 for r in group)}
        summary["outcomes"][cell][arm] = analysis.outcome_counts(group)
        summary["events_files"][cell][arm] = sorted(
            {r.proxy.events_file for r in group if r.proxy.events_file})
    summary.update(_comparisons(records, groups, cells, max_errors))
    summary["faults"] = fault_summary(records, max_errors)  # {} without an injected cell
    plain: dict[str, Any] = _plain(summary)
    return plain


def _comparisons(records: list[EpisodeRecord], groups: dict[tuple[str, str], list[
        EpisodeRecord]], cells: dict[str, Any], max_errors: int) -> dict[str, Any]:
    """Amplification, name overlap and damage tests (observe arm), and repair effects."""
    observe = "off" if any(arm == "off" for _, arm in groups) else "on"
    pairs: dict[str, tuple[analysis.ChannelRates, analysis.ChannelRates]] = {}
    amplification: dict[str, Any] = {}
    names: dict[str, Any] = {}
    for key, cell in cells.items():
        if cell.reference:
            continue
        ref_key = next((k for k, c in cells.items() if c.reference and c.model == cell.model
                        and c.domain == cell.domain), None)
        if ref_key is None or (ref_key, observe) not in groups or (key, observe) not in groups:
            continue
        ref_rates = analysis.env_channel_rates(groups[ref_key, observe])
        low_rates = analysis.env_channel_rates(groups[key, observe])
        pairs[key] = (ref_rates, low_rates)
        amplification[key] = {"reference": ref_key, "arm": observe, "ratios": {
            c: rounded(v) for c, v in analysis.amplification(ref_rates, low_rates).items()}}
        ref_names = analysis.hallucinated_names(groups[ref_key, observe])
        low_names = analysis.hallucinated_names(groups[key, observe])
        overlap = analysis.name_overlap(ref_names, low_names)
        names[key] = {"reference": ref_key, "spearman": rounded(overlap.spearman),
                      "p_value": analysis.p_rounded(overlap.p_value), "names": overlap.names,
                      "lower_hallucinations": overlap.lower_total,
                      "lower_new": overlap.lower_new, "share_new": rounded(overlap.share_new),
                      "reference_counts": dict(ref_names), "lower_counts": dict(low_names)}
    tests = analysis.damage_tests(pairs) if pairs else []
    damaged = {key: any(t.significant for t in tests if t.cell == key) for key in pairs}
    effects: dict[str, Any] = defaultdict(dict)
    arm_effects: dict[str, Any] = defaultdict(dict)
    spend: dict[str, Any] = defaultdict(dict)
    for key in cells:
        for treated, baseline in ARM_COMPARISONS:
            if (key, treated) not in groups or (key, baseline) not in groups:
                continue
            label = f"{treated} − {baseline}"
            curve = {}
            for k in range(1, max_errors + 1):
                effect = analysis.repair_effect(groups[key, treated], groups[key, baseline], k)
                if effect is not None:
                    curve[k] = _effect(effect)
            arm_effects[key][label] = curve
            if (treated, baseline) == ("on", "off"):
                effects[key] = curve
            difference = analysis.spend_difference(groups[key, treated], groups[key, baseline])
            if difference is not None:
                spend[key][label] = _effect(difference)
    return {
        "amplification": amplification, "hallucinated_names": names,
        "damage_tests": [{"cell": t.cell, "channel": t.channel, "ratio": rounded(t.ratio),
                          "p_value": analysis.p_rounded(t.p_value),
                          "holm_p": analysis.p_rounded(t.adjusted),
                          "significant": t.significant} for t in tests],
        "damaged": damaged, "references": sorted(k for k, c in cells.items() if c.reference),
        "repair_effect": effects, "arm_effects": arm_effects,
        "spend_difference": spend,
    }


def _effect(effect: analysis.PairedEffect) -> dict[str, Any]:
    return {"difference": rounded(effect.difference), "low": rounded(effect.low),
            "high": rounded(effect.high), "pairs": effect.pairs}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
