"""`python -m bench.report runs/NAME`: (re)build the report from saved records alone.

Writes `summary.json`, `report.md`, `report.html` and PNG plots next to
`episodes.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from bench.record_store import RecordStore
from bench.records import ARMS, ENV_CHANNELS, EpisodeRecord
from bench.report.faults import fault_lines
from bench.report.plots import draw_all
from bench.stats.summary import REPORT_BUDGETS, summarise

REPEATED = "repeated_failure"
SMALL_MODEL_NOTE = (
    "The default cells run Qwen2.5-Coder-0.5B-Instruct on a CPU. A 0.5B model can show "
    "the process metrics (which channels err, how often, how a lower bit-width amplifies "
    "them, whether repair removes the errors before they cost budget); it cannot show the "
    "paper's end-score effects, because it rarely completes a task at any precision. "
    "There is no BF16 here: 'amplification' is lower-bit versus Q4_K_M as shipped."
)


def percent(value: Any) -> str:
    """A rate as the reports print it (one decimal), "–" when there is none."""
    return "–" if value is None else f"{100 * float(value):.1f}%"


def _ci(entry: dict[str, Any]) -> str:
    if entry["rate"] is None:
        return "–"
    return (f"{percent(entry['rate'])} [{percent(entry['low'])}, {percent(entry['high'])}] "
            f"(n={entry['n']})")


def _arms(arms: dict[str, Any]) -> list[str]:
    """A cell's arms in the bench's order (off, on, on+budget), not alphabetical."""
    return [arm for arm in ARMS if arm in arms]


def _short(entry: dict[str, Any]) -> str:
    if entry["rate"] is None:
        return "–"
    return f"{percent(entry['rate'])} [{percent(entry['low'])}, {percent(entry['high'])}]"


def _budgets(summary: dict[str, Any]) -> list[int]:
    return list(range(1, int(summary.get("max_errors", max(REPORT_BUDGETS))) + 1))


def _success_table(summary: dict[str, Any]) -> list[str]:
    budgets = _budgets(summary)
    head = "| cell | repair | n | " + " | ".join(f"K={k}" for k in budgets) + " |"
    lines = [head, "|" + "---|" * (3 + len(budgets))]
    for cell, arms in sorted(summary["success_at_k"].items()):
        for arm in _arms(arms):
            curve = arms[arm]
            n = curve[str(budgets[0])]["n"]
            cells = [_short(curve[str(k)]) if str(k) in curve else "–" for k in budgets]
            lines.append(f"| {cell} | {arm} | {n} | " + " | ".join(cells) + " |")
    return lines


def _budget_table(summary: dict[str, Any]) -> list[str]:
    lines = ["| cell | repair | episodes | mean spent [95% CI] | median | distribution "
             "(errors: episodes) | spent all K | reached ≤2 left |",
             "|---|---|---|---|---|---|---|---|"]
    for cell, arms in sorted(summary["budget_spent"].items()):
        for arm in _arms(arms):
            spent = arms[arm]
            mean = "–" if spent["mean"] is None else (
                f"{spent['mean']:.2f} [{spent['low']:.2f}, {spent['high']:.2f}]")
            distribution = ", ".join(f"{e}: {c}" for e, c in spent["distribution"].items())
            lines.append(f"| {cell} | {arm} | {spent['n']} | {mean} | {spent['median']} | "
                         f"{distribution or '–'} | {spent['exhausted']} | "
                         f"{spent['low_budget_episodes']} |")
    return lines


def _spend_table(summary: dict[str, Any]) -> list[str]:
    rows = [(cell, label, effect) for cell, labels in sorted(summary["spend_difference"].items())
            for label, effect in labels.items()]
    if not rows:
        return ["No two arms ran on the same tasks.", ""]
    lines = ["| cell | arms | mean difference in errors spent [95% CI] | pairs |",
             "|---|---|---|---|"]
    for cell, label, effect in rows:
        lines.append(f"| {cell} | {label} | {effect['difference']:+.2f} "
                     f"[{effect['low']:+.2f}, {effect['high']:+.2f}] | {effect['pairs']} |")
    return lines + [""]


def _effects_table(summary: dict[str, Any]) -> list[str]:
    budgets = _budgets(summary)
    rows = [(cell, label, curve) for cell, labels in sorted(summary["arm_effects"].items())
            for label, curve in labels.items()]
    if not rows:
        return ["No two arms ran on the same tasks.", ""]
    lines = ["| cell | arms | pairs | " + " | ".join(f"K={k}" for k in budgets) + " |",
             "|" + "---|" * (3 + len(budgets))]
    for cell, label, curve in rows:
        pairs = next(iter(curve.values()))["pairs"] if curve else 0
        values = [f"{percent(curve[str(k)]['difference'])} [{percent(curve[str(k)]['low'])}, "
                  f"{percent(curve[str(k)]['high'])}]" if str(k) in curve else "–"
                  for k in budgets]
        lines.append(f"| {cell} | {label} | {pairs} | " + " | ".join(values) + " |")
    return lines + [""]


def _outcome_table(summary: dict[str, Any]) -> list[str]:
    outcomes = sorted({o for arms in summary["outcomes"].values() for counts in arms.values()
                       for o in counts})
    if not outcomes:
        return ["No reflexguard outcomes: no model ran behind the proxy.", ""]
    lines = ["| cell | repair | " + " | ".join(outcomes) + " |",
             "|" + "---|" * (2 + len(outcomes))]
    for cell, arms in sorted(summary["outcomes"].items()):
        for arm in _arms(arms):
            lines.append(f"| {cell} | {arm} | "
                         + " | ".join(str(arms[arm].get(o, 0)) for o in outcomes) + " |")
    if REPEATED not in outcomes:
        lines += ["", f"No `{REPEATED}` outcome was recorded in this run."]
    return lines + [""]


def _events_files(summary: dict[str, Any]) -> list[str]:
    files = [(cell, arm, path) for cell, arms in sorted(summary["events_files"].items())
             for arm in _arms(arms) for path in arms[arm]]
    if not files:
        return ["No events files: no proxy ran (simulated agent).", ""]
    lines = ["reflexguard's events per cell and arm, relative to this folder (margins are "
             "in them when the proxy measured them; `reflexguard screen` reads them):", ""]
    lines += [f"- {cell}, {arm}: `{path}`" for cell, arm, path in files]
    return lines + [""]


def _channel_table(table: dict[str, Any], channels: tuple[str, ...]) -> list[str]:
    lines = ["| cell | repair | calls | turns/ep | " + " | ".join(channels) + " |",
             "|" + "---|" * (4 + len(channels))]
    for cell, arms in sorted(table.items()):
        for arm, rates in sorted(arms.items()):
            values = [f"{percent(rates['per_call'][c])} ({rates['counts'][c]}; "
                      f"{percent(rates['per_episode'][c])} ep)" for c in channels]
            lines.append(f"| {cell} | {arm} | {rates['calls']} | {rates['mean_agent_turns']} | "
                         + " | ".join(values) + " |")
    return lines


def _termination_table(termination: dict[str, Any]) -> list[str]:
    reasons = sorted({r for arms in termination.values() for counts in arms.values()
                      for r in counts})
    lines = ["| cell | repair | " + " | ".join(reasons) + " |",
             "|" + "---|" * (2 + len(reasons))]
    for cell, arms in sorted(termination.items()):
        for arm, counts in sorted(arms.items()):
            lines.append(f"| {cell} | {arm} | "
                         + " | ".join(str(counts.get(r, 0)) for r in reasons) + " |")
    return lines


def _verdicts(summary: dict[str, Any]) -> list[str]:
    lines = []
    top = _budgets(summary)[-1]
    low = min(2, top)
    for cell in sorted(summary["success_at_k"]):
        arms = summary["success_at_k"][cell]
        parts = []
        for arm in _arms(arms):
            parts.append(f"with repair {arm}, success is {percent(arms[arm][str(top)]['rate'])} "
                         f"at K={top} and {percent(arms[arm][str(low)]['rate'])} at K={low}")
        text = f"**{cell}.** " + "; ".join(parts) + "."
        if cell in summary["damaged"]:
            significant = [t for t in summary["damage_tests"]
                           if t["cell"] == cell and t["significant"]]
            if significant:
                listed = ", ".join(f"{t['channel']} ×{t['ratio']} (Holm p={t['holm_p']})"
                                   for t in significant)
                text += f" Damaged: amplified {listed} against its reference."
            else:
                text += (" Not shown to be damaged: no channel is significantly amplified "
                         "against its reference after Holm correction.")
        elif cell in summary.get("references", [cell]):
            text += " Reference precision."
        else:  # e.g. a run of the on+budget arm alone: no observed arm to compare
            text += (" Damage not assessed: this run has no repair-off arm of this cell and "
                     "its reference to compare.")
        for label, curve in summary["arm_effects"].get(cell, {}).items():
            effect = curve.get(str(low))
            if effect:
                text += (f" {label}: success at K={low} changed by "
                         f"{percent(effect['difference'])} [{percent(effect['low'])}, "
                         f"{percent(effect['high'])}] over {effect['pairs']} paired episodes.")
        for arm in ("on", "on+budget", "on+stop"):
            repairs = summary["repairs"][cell].get(arm)
            if repairs and repairs["attempted"]:
                text += (f" reflexguard ({arm}) repaired {repairs['succeeded']} of "
                         f"{repairs['attempted']} invalid replies "
                         f"({repairs['extra_upstream_calls']} extra calls).")
        lines += [text, ""]
    return lines


def render(summary: dict[str, Any], plots: list[str]) -> str:
    simulated = summary["simulated"]
    title = "# reflexguard bench report" + (" — SIMULATED AGENT" if simulated else "")
    lines = [title, ""]
    if simulated:
        lines += ["> Every episode here was produced by the test-only **simulated agent**, which "
                  "replays gold actions with injected errors. No model was run.", ""]
    lines += [f"- episodes: {summary['episodes']}",
              f"- user: {'; '.join(summary['users'])}",
              f"- judge: {'; '.join(summary['judges'])}",
              f"- unscored tasks (excluded from success): "
              f"{', '.join(summary['unscored_tasks']) or 'none'}", ""]
    if not simulated:
        lines += [SMALL_MODEL_NOTE, ""]
    lines += ["## Verdicts", ""] + _verdicts(summary)
    lines += fault_lines(summary)  # INJECTED faults beside natural errors; none: nothing
    top = _budgets(summary)[-1]
    lines += ["## Success at every error budget", "",
              f"Recomputed exactly from one run at K={top}: reward 1 and fewer than K error "
              "tool messages. Wilson 95% intervals; n = scored episodes. Infrastructure errors "
              "and episode timeouts count as failures. `on+budget` = repair on, and the agent "
              f"sends its budget (`x-reflexguard-error-budget: {top}`) on every request.", ""]
    lines += _success_table(summary) + [""]
    lines += ["## Budget spent per episode", "",
              "Error tool messages that reached tau2 per episode (every episode, unscored ones "
              "too): mean with a bootstrap 95% CI, median, how many episodes spent how many, "
              "how many tau2 ended for spending all K (`too_many_errors`), and how many "
              "took an agent turn with 2 or fewer errors left (the only turns where "
              "`on+budget`'s policy differs from `on`'s).", ""]
    lines += _budget_table(summary) + [""]
    lines += ["Paired by task and trial (bootstrap 95% CI; negative = the first arm spent "
              "less):", ""] + _spend_table(summary)
    lines += ["## reflexguard outcomes per arm", "",
              "One outcome per guarded request, from the events files; `repeated_failure` is "
              "a re-ask that returned the same invalid call.", ""] + _outcome_table(summary)
    lines += ["## Errors that reached the environment", "",
              "Per tool call (count; share of episodes with at least one). malformed_args "
              "never reaches tau2's environment: it crashes the episode, counted here once.",
              ""] + _channel_table(summary["env_channels"], ENV_CHANNELS) + [""]
    model_channels = tuple(next(iter(next(iter(summary["model_channels"].values())).values()))
                           ["per_call"]) if summary["model_channels"] else ()
    lines += ["## Errors the model produced (reflexguard, first answers)", ""]
    if any(arm["calls"] for arms in summary["model_channels"].values() for arm in arms.values()):
        lines += _channel_table(summary["model_channels"], model_channels) + [""]
    else:
        lines += ["No reflexguard events: no model ran behind the proxy.", ""]
    lines += ["## Amplification (lower precision over reference, observe arm)", "",
              "| cell | channel | ratio | Fisher p | Holm p | significant |",
              "|---|---|---|---|---|---|"]
    for test in summary["damage_tests"]:
        lines.append(f"| {test['cell']} | {test['channel']} | {test['ratio']} | "
                     f"{test['p_value']} | {test['holm_p']} | {test['significant']} |")
    lines += ["", "## Hallucinated tool names", "",
              "| cell | names | Spearman ρ | lower hallucinations | new at lower | share new |",
              "|---|---|---|---|---|---|"]
    for cell, names in sorted(summary["hallucinated_names"].items()):
        lines.append(f"| {cell} | {names['names']} | {names['spearman']} | "
                     f"{names['lower_hallucinations']} | {names['lower_new']} | "
                     f"{percent(names['share_new'])} |")
    lines += ["", "## Recovery and repairs", "",
              "| cell | repair | recovered within 2 turns | repairs attempted | succeeded | "
              "extra upstream calls |", "|---|---|---|---|---|---|"]
    for cell, arms in sorted(summary["recovery"].items()):
        for arm, rate in sorted(arms.items()):
            repairs = summary["repairs"][cell][arm]
            lines.append(f"| {cell} | {arm} | {_ci(rate)} | {repairs['attempted']} | "
                         f"{repairs['succeeded']} | {repairs['extra_upstream_calls']} |")
    lines += ["", "## Arm effects (paired by task and trial, bootstrap 95% CI)", "",
              "Success of the first arm minus the second at every K.", ""]
    lines += _effects_table(summary)
    lines += ["## Events files", ""] + _events_files(summary)
    lines += ["## Termination reasons", "",
              "`infrastructure_error` (a crash) and `episode_timeout` (the wall-clock limit, "
              "`--episode-timeout`) are failures whatever the partial trajectory did.", ""]
    lines += _termination_table(summary["termination"])
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    lines += ["Damage rule: a lower-precision cell is damaged when any environment channel's "
              "per-call error rate is higher than its reference's by a one-sided Fisher exact "
              "test with Holm correction over all cells × channels at α=0.05 "
              "(docs/bench.md).", ""]
    return "\n".join(lines)


def run_budget(records: list[EpisodeRecord], asked: int | None) -> int:
    """The K to report up to: the run's own, which success above cannot be recomputed at."""
    recorded = {r.max_errors for r in records if r.max_errors is not None}
    ceiling = min(recorded) if recorded else None
    if asked is None:
        return ceiling or 10
    if ceiling is not None and asked > ceiling:
        raise ValueError(f"the episodes ran at K={ceiling}: success at K={asked} cannot be "
                         "recomputed from them")
    return asked


def build_report(out: Path, max_errors: int | None = None) -> dict[str, Any]:
    records: list[EpisodeRecord] = RecordStore(out / "episodes.jsonl").load()
    if not records:
        raise FileNotFoundError(f"no episodes in {out / 'episodes.jsonl'}")
    summary = summarise(records, run_budget(records, max_errors))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plots = draw_all(summary, out)
    markdown = render(summary, plots)
    (out / "report.md").write_text(markdown)
    (out / "report.html").write_text(to_html(markdown, summary["simulated"]))
    return summary


HTML_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;"
              "line-height:1.45}table{border-collapse:collapse;font-size:.85em}"
              "td,th{border:1px solid #ccc;padding:.25em .5em}img{max-width:100%}")


def to_html(markdown: str, simulated: bool) -> str:
    """The same report as one HTML page (markdown-it, tables on), images alongside."""
    body = MarkdownIt("commonmark").enable("table").render(markdown)
    title = "reflexguard bench report" + (" (SIMULATED)" if simulated else "")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
            f"<style>{HTML_STYLE}</style></head><body>{body}</body></html>\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", type=Path, help="the run folder, e.g. runs/default")
    parser.add_argument("--max-errors", type=int, default=None,
                        help="report up to this K (default: the K the episodes ran at)")
    args = parser.parse_args()
    try:
        build_report(args.run, args.max_errors)
    except (FileNotFoundError, ValueError) as exc:
        print(f"bench.report.writer: error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"report written to {args.run / 'report.md'}")


if __name__ == "__main__":
    main()
