"""The study's report from `decisions.jsonl` alone: summary.json, report.md, plots and one
calibration file per candidate precision (the format `reflexguard screen` reads)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.margins.classify import margins_of
from bench.margins.events import write_events
from bench.margins.records import DecisionStore
from bench.margins.runner import REFERENCE, VARIANTS
from bench.stats import margins as stats
from bench.stats.analysis import Rate, wilson

SCHEMA = "reflexguard.margin_calibration/1"
THIN_DEFAULT = 1.0  # the proxy's margin_threshold default (docs/screen.md)
ERROR_DEFINITION = ("the candidate's first call is invalid in any reflexguard channel "
                    "(unknown_tool, malformed_args, schema_violation, ...), or the reply has "
                    "no call, or it names another tool than the gold action")


def rows_of(records: Sequence[dict[str, Any]]) -> list[stats.Row]:
    rows = []
    for record in records:
        # margins are recomputed from the recorded logprobs, so a later definition applies
        name_margin, call_margin = margins_of(record["completion"])
        rows.append(stats.Row(
            variant=record["variant"], domain=record["domain"], task_id=record["task_id"],
            step=int(record["step"]), gold_name=record["gold_name"],
            chosen_name=record["chosen_name"], channel=record["channel"],
            name_margin=name_margin, call_margin=call_margin,
            seconds=float(record["seconds"]), first_of_task=bool(record["first_of_task"])))
    return rows


def _rate(rate: Rate) -> dict[str, Any]:
    def clean(x: float) -> float | None:
        return None if math.isnan(x) else round(x, 4)

    return {"k": rate.successes, "n": rate.n, "rate": clean(rate.value),
            "low": clean(rate.low), "high": clean(rate.high)}


def _num(value: float | None, digits: int = 4) -> float | str | None:
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return round(value, digits)


def _interval(found: stats.Interval) -> dict[str, Any]:
    return {"auroc": _num(found.value), "low": _num(found.low), "high": _num(found.high),
            "n": found.n, "positives": found.positives, "tasks": found.clusters}


def _timing(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Seconds per decision: with nothing cached (the first of a domain at a precision),
    at a task's first step (the shared system prompt and tools cached), at later steps
    (the task's conversation so far cached)."""
    kinds: dict[str, list[dict[str, Any]]] = {"cold": [], "first_of_task": [],
                                              "later_steps": []}
    for record in records:
        kind = ("cold" if not record["reused_tokens"] else
                "first_of_task" if record["first_of_task"] else "later_steps")
        kinds[kind].append(record)

    def stats_of(group: list[dict[str, Any]]) -> dict[str, Any]:
        if not group:
            return {"n": 0, "median_s": None, "median_new_tokens": None}
        return {"n": len(group),
                "median_s": round(statistics.median(r["seconds"] for r in group), 2),
                "median_new_tokens": statistics.median(
                    r["prompt_tokens"] - r["reused_tokens"] for r in group),
                "median_prompt_tokens": statistics.median(r["prompt_tokens"] for r in group)}

    reused = [r["reused_tokens"] / r["prompt_tokens"] for r in records if r["prompt_tokens"]]
    return {**{kind: stats_of(group) for kind, group in kinds.items()},
            "total_s": round(sum(r["seconds"] for r in records), 1),
            "mean_reused_prompt_share": round(statistics.fmean(reused), 3) if reused else None}


def _predictor(measured: Sequence[stats.Pair], margin: str) -> dict[str, Any]:
    def value(p: stats.Pair) -> float | None:
        found: float | None = getattr(p.reference, margin)
        return found

    usable = [p for p in measured if value(p) is not None]
    scores = [-(value(p) or 0.0) for p in usable]  # a thinner margin predicts the event
    groups = [f"{p.reference.domain}/{p.reference.task_id}" for p in usable]
    return {"measured": len(usable), "unmeasured": len(measured) - len(usable),
            "flip": _interval(stats.bootstrap_auroc(scores, [p.flip for p in usable], groups)),
            "error": _interval(stats.bootstrap_auroc(
                scores, [p.candidate.error for p in usable], groups))}


def _bins(bins: Sequence[stats.Bin]) -> list[dict[str, Any]]:
    return [{"lo": _num(b.lo), "hi": _num(b.hi), "n": b.n,
             "flip_rate": _rate(b.flip_rate), "error_rate": _rate(b.error_rate)} for b in bins]


def _candidate(reference: list[stats.Row], candidate: list[stats.Row]) -> dict[str, Any]:
    joined = stats.pairs(reference, candidate)
    names = stats.name_stats([p.reference for p in joined], [p.candidate for p in joined])
    measured = [p for p in joined if p.reference.name_margin is not None]
    margins = [p.reference.name_margin or 0.0 for p in measured]
    deciles = stats.binned(margins, [p.flip for p in measured],
                           [p.candidate.error for p in measured],
                           stats.quantile_edges(margins, stats.DECILES))
    calibration = stats.calibrate(measured)
    return {
        "pairs": len(joined),
        "flips": _rate(wilson(sum(p.flip for p in joined), len(joined))),
        "names": {"reference_unknown": names.reference_wrong,
                  "candidate_unknown": names.candidate_wrong,
                  "amplification": _num(names.amplification),
                  "spearman": _num(names.overlap.spearman),
                  "spearman_p": _num(names.overlap.p_value), "names": names.overlap.names,
                  "share_new": _num(names.overlap.share_new),
                  "candidate_new": names.overlap.lower_new},
        "name_margin": _predictor(joined, "name_margin"),
        "call_margin": _predictor(joined, "call_margin"),
        "deciles": _bins(deciles),
        "calibration": {
            "bins": _bins(calibration.bins), "fit_n": calibration.fit_n,
            "held_n": calibration.held_n,
            "held_flip_auroc": _num(calibration.held_flip_auroc),
            "held_error_auroc": _num(calibration.held_error_auroc),
            "held_flip_brier": _num(calibration.held_flip_brier),
            "held_error_brier": _num(calibration.held_error_brier),
            "base_flip_brier": _num(calibration.base_flip_brier),
            "base_error_brier": _num(calibration.base_error_brier),
            "threshold": _num(calibration.threshold),
            "threshold_held_j": _num(calibration.threshold_held_j),
            "best_held_threshold": _num(calibration.best_held_threshold)},
        "_calibration": calibration,
    }


def summarise(records: list[dict[str, Any]], plan: dict[str, Any]) -> dict[str, Any]:
    rows = rows_of(records)
    variants = [v for v in VARIANTS if any(r.variant == v for r in rows)]
    variants += sorted({r.variant for r in rows} - set(variants))
    per_variant: dict[str, Any] = {}
    for variant in variants:
        mine = [r for r in rows if r.variant == variant]
        recs = [rec for rec in records if rec["variant"] == variant]
        per_variant[variant] = {
            "decisions": len(mine),
            "exact_match": _rate(stats.exact_match(mine)),
            "channels": {c: _rate(r) for c, r in stats.channel_rates(mine).items()},
            "errors": _rate(wilson(sum(r.error for r in mine), len(mine))),
            "unknown_names": dict(stats.unknown_names(mine).most_common()),
            "by_domain": {d: {"decisions": sum(1 for r in mine if r.domain == d),
                              "exact_match": _rate(stats.exact_match(
                                  [r for r in mine if r.domain == d]))}
                          for d in sorted({r.domain for r in mine})},
            "timing": _timing(recs),
        }
    reference = [r for r in rows if r.variant == REFERENCE]
    candidates = {v: _candidate(reference, [r for r in rows if r.variant == v])
                  for v in variants if v != REFERENCE and reference}
    return {"reference": REFERENCE, "variants": variants, "plan": plan,
            "per_variant": per_variant, "candidates": candidates,
            "model": records[0]["model"].rsplit("-", 1)[0] if records else None}


def calibration_file(summary: dict[str, Any], candidate: str, source: str,
                     thin_threshold: float, thin_source: str) -> dict[str, Any]:
    calibration: stats.Calibration = summary["candidates"][candidate]["_calibration"]
    return {
        "schema": SCHEMA, "source": source, "model": summary["model"],
        "reference": REFERENCE, "candidate": candidate, "simulated": False,
        "error_definition": ERROR_DEFINITION,
        "predictor": "reference name margin (nats), bins fitted on the fit half of tasks",
        "fit_decisions": calibration.fit_n, "held_out_decisions": calibration.held_n,
        "thin_threshold_source": thin_source,
        "fit_threshold": summary["candidates"][candidate]["calibration"]["threshold"],
        "held_out": {k: summary["candidates"][candidate]["calibration"][k] for k in (
            "held_flip_auroc", "held_error_auroc", "held_flip_brier", "held_error_brier",
            "base_flip_brier", "base_error_brier", "best_held_threshold")},
        "bins": [{"lo": b.lo, "hi": b.hi, "n": b.n,
                  "flip_rate": round(b.flips / b.n, 4) if b.n else 0.0,
                  "error_rate": round(b.errors / b.n, 4) if b.n else 0.0}
                 for b in calibration.bins],
        "thin_threshold": thin_threshold,
    }


def build_report(out: Path, command: str) -> dict[str, Any]:
    from bench.margins import plots, writer

    records = DecisionStore(out / "decisions.jsonl").load()
    plan_path = out / "plan.json"
    plan = orjson.loads(plan_path.read_bytes()) if plan_path.exists() else {}
    summary = summarise(records, plan)
    if plan.get("command") and plan["command"] != command:  # a rebuilt report
        command = f"{plan['command']} (report rebuilt by {command})"
    source = f"{command} ({time.strftime('%Y-%m-%d', time.gmtime())})"
    for candidate, found in summary["candidates"].items():
        if found["_calibration"].fit_n:
            # docs/screen.md: the file carries the threshold that separated flips best on
            # the held-out tasks; else the fit tasks' best; else the proxy's default.
            cal = found["calibration"]
            picked = [(t, why) for t, why in (
                (cal["best_held_threshold"], "best Youden J for a flip on the held-out tasks"),
                (cal["threshold"], "best Youden J for a flip on the fit tasks"))
                if isinstance(t, float)] or [(THIN_DEFAULT, "the proxy's default")]
            data = calibration_file(summary, candidate, source, *picked[0])
            (out / f"calibration-{candidate}.json").write_bytes(
                orjson.dumps(data, option=orjson.OPT_INDENT_2))
    write_events(records, out, THIN_DEFAULT)  # what `reflexguard screen` reads
    plots.draw_all(summary, out)
    writer.write(summary, out, command)
    public = {k: v for k, v in summary.items() if k != "candidates"}
    public["candidates"] = {c: {k: v for k, v in found.items() if not k.startswith("_")}
                            for c, found in summary["candidates"].items()}
    (out / "summary.json").write_bytes(orjson.dumps(public, option=orjson.OPT_INDENT_2))
    return public
