"""report.md of the margins study, from the summary alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.margins.runner import REFERENCE


def _pct(rate: dict[str, Any]) -> str:
    if rate["rate"] is None:
        return "n/a (n=0)"
    return (f"{100 * rate['rate']:.1f}% [{100 * rate['low']:.1f}, {100 * rate['high']:.1f}] "
            f"({rate['k']}/{rate['n']})")


def _auc(found: dict[str, Any]) -> str:
    if found["auroc"] is None:
        return f"n/a (n={found['n']}, {found['positives']} events)"
    interval = (f" [{found['low']:.2f}, {found['high']:.2f}]" if found["low"] is not None
                else "")
    return (f"{found['auroc']:.2f}{interval} (n={found['n']}, {found['positives']} events, "
            f"{found['tasks']} tasks)")


def _value(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _variants(summary: dict[str, Any]) -> list[str]:
    lines = ["| precision | decisions | gold tool name | any error | "
             + " | ".join(sorted({c for v in summary["variants"]
                                  for c in summary["per_variant"][v]["channels"]})) + " |"]
    channels = sorted({c for v in summary["variants"]
                       for c in summary["per_variant"][v]["channels"]})
    lines.append("|" + "---|" * (4 + len(channels)))
    for variant in summary["variants"]:
        found = summary["per_variant"][variant]
        cells = [_pct(found["channels"][c]) if c in found["channels"] else "0"
                 for c in channels]
        lines.append(f"| {variant} | {found['decisions']} | {_pct(found['exact_match'])} | "
                     f"{_pct(found['errors'])} | " + " | ".join(cells) + " |")
    return lines


def _timing(summary: dict[str, Any]) -> list[str]:
    lines = ["| precision | nothing cached: median s (n, new prompt tokens) | first step of a "
             "task, system prompt cached | later steps, conversation cached | mean share of "
             "the prompt reused | total s |", "|---|---|---|---|---|---|"]

    def cell(found: dict[str, Any]) -> str:
        if not found["n"]:
            return "–"
        return (f"{_value(found['median_s'], 1)} (n={found['n']}, "
                f"{_value(found['median_new_tokens'], 0)} tokens)")

    for variant in summary["variants"]:
        t = summary["per_variant"][variant]["timing"]
        lines.append(f"| {variant} | {cell(t['cold'])} | {cell(t['first_of_task'])} | "
                     f"{cell(t['later_steps'])} | {_value(t['mean_reused_prompt_share'])} | "
                     f"{_value(t['total_s'], 0)} |")
    return lines


TASKS_LISTED = 12  # a BFCL domain has hundreds of cases: count them, name the first few


def _tasks(tasks: dict[str, list[str]]) -> str:
    return "; ".join(
        f"{domain}: {', '.join(ids)}" if len(ids) <= TASKS_LISTED else
        f"{domain}: {len(ids)} ({', '.join(ids[:TASKS_LISTED])}, …)"
        for domain, ids in tasks.items()) or "none"


def _domains(summary: dict[str, Any]) -> list[str]:
    lines = ["| precision | " + " | ".join(
        f"{d}: gold tool name" for d in summary.get("plan", {}).get("per_domain", {})) + " |"]
    domains = list(summary.get("plan", {}).get("per_domain", {}))
    lines.append("|" + "---|" * (1 + len(domains)))
    for variant in summary["variants"]:
        found = summary["per_variant"][variant]["by_domain"]
        lines.append(f"| {variant} | " + " | ".join(
            _pct(found[d]["exact_match"]) if d in found else "–" for d in domains) + " |")
    return lines


def _candidate(name: str, found: dict[str, Any]) -> list[str]:
    names = found["names"]
    cal = found["calibration"]
    lines = [
        f"### {name} vs {REFERENCE}", "",
        f"- Paired decisions: {found['pairs']}; **flips** of the chosen tool name: "
        f"{_pct(found['flips'])}.",
        f"- Hallucinated (unknown_tool) names: {REFERENCE} {names['reference_unknown']}, "
        f"{name} {names['candidate_unknown']}; amplification {_value(names['amplification'], 2)}; "
        f"Spearman of wrong-name counts {_value(names['spearman'], 2)} over {names['names']} "
        f"names (needs at least 3); share of {name}'s wrong names that are new "
        f"{_value(names['share_new'], 2)}.",
        f"- {REFERENCE} **name margin** as a predictor (thinner margin = higher risk; "
        f"{found['name_margin']['unmeasured']} decisions without a call have none): "
        f"AUROC for a flip {_auc(found['name_margin']['flip'])}; for an error "
        f"{_auc(found['name_margin']['error'])}.",
        f"- {REFERENCE} **call margin**: AUROC for a flip {_auc(found['call_margin']['flip'])}; "
        f"for an error {_auc(found['call_margin']['error'])}.",
        f"- **Calibration** (bins fitted on {cal['fit_n']} decisions of the fit tasks, scored on "
        f"{cal['held_n']} decisions of held-out tasks): held-out AUROC flip "
        f"{_value(cal['held_flip_auroc'], 2)}, error {_value(cal['held_error_auroc'], 2)}; "
        f"Brier flip {_value(cal['held_flip_brier'])} (constant-rate baseline "
        f"{_value(cal['base_flip_brier'])}), error {_value(cal['held_error_brier'])} "
        f"(baseline {_value(cal['base_error_brier'])}); thin threshold best on the fit tasks "
        f"{_value(cal['threshold'], 2)} nats (Youden J held out "
        f"{_value(cal['threshold_held_j'], 2)}); best on the held-out tasks "
        f"{_value(cal['best_held_threshold'], 2)} nats.", "",
        "| name margin bin (nats) | n | flip rate | error rate |", "|---|---|---|---|"]
    for b in found["deciles"]:
        lo = "-inf" if b["lo"] is None else f"{b['lo']:.2f}"
        hi = "+inf" if b["hi"] is None else f"{b['hi']:.2f}"
        lines.append(f"| [{lo}, {hi}) | {b['n']} | {_pct(b['flip_rate'])} | "
                     f"{_pct(b['error_rate'])} |")
    return [*lines, ""]


def write(summary: dict[str, Any], out: Path, command: str) -> None:
    plan = summary.get("plan", {})
    skipped = {d: len(v) for d, v in plan.get("skipped", {}).items()}
    lines = [
        "# Margins study: teacher-forced next-call decisions at three precisions", "",
        f"Command: `{command}`. Model: {summary['model']}; reference {REFERENCE} as "
        "shipped, the others requantized from it (lower-bit vs Q4_K_M, never vs full "
        "precision). Greedy decoding, top-5 logprobs. Not simulated.", "",
        f"Tasks: {_tasks(plan.get('tasks', {}))}. Decisions per precision: "
        f"{plan.get('per_domain', {})}; gold actions skipped (not an agent tool): "
        f"{skipped or 0}; gold calls the environment answered with an error: "
        f"{plan.get('gold_errors', {})}.", "",
        "## Per precision", "", *_variants(summary), "",
        *_domains(summary), "",
        "![rates](rates.png)", "",
        "## Flips and margins", ""]
    for name, found in sorted(summary["candidates"].items()):
        lines += _candidate(name, found)
    if summary["candidates"]:
        lines += ["![flip rate per margin decile](flip_deciles.png)", ""]
    lines += ["## Time per decision", "", *_timing(summary), "",
              "Calibration files (the format `reflexguard screen` reads): "
              + ", ".join(f"`calibration-{c}.json`" for c in sorted(summary["candidates"]))
              + ".", ""]
    (out / "report.md").write_text("\n".join(lines))
