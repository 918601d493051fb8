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
from bench.records import ENV_CHANNELS, EpisodeRecord
from bench.report.plots import draw_all
from bench.stats.summary import REPORT_BUDGETS, summarise

SMALL_MODEL_NOTE = (
    "The default cells run Qwen2.5-Coder-0.5B-Instruct on a CPU. A 0.5B model can show "
    "the process metrics (which channels err, how often, how a lower bit-width amplifies "
    "them, whether repair removes the errors before they cost budget); it cannot show the "
    "paper's end-score effects, because it rarely completes a task at any precision. "
    "There is no BF16 here: 'amplification' is lower-bit versus Q4_K_M as shipped."
)


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.1f}%"


def _ci(entry: dict[str, Any]) -> str:
    if entry["rate"] is None:
        return "–"
    return f"{_pct(entry['rate'])} [{_pct(entry['low'])}, {_pct(entry['high'])}] (n={entry['n']})"


def _success_table(summary: dict[str, Any]) -> list[str]:
    head = "| cell | repair | " + " | ".join(f"K={k}" for k in REPORT_BUDGETS) + " |"
    lines = [head, "|" + "---|" * (2 + len(REPORT_BUDGETS))]
    for cell, arms in sorted(summary["success_at_k"].items()):
        for arm, curve in sorted(arms.items()):
            cells = [_ci(curve[str(k)]) if str(k) in curve else "–" for k in REPORT_BUDGETS]
            lines.append(f"| {cell} | {arm} | " + " | ".join(cells) + " |")
    return lines


def _channel_table(table: dict[str, Any], channels: tuple[str, ...]) -> list[str]:
    lines = ["| cell | repair | calls | turns/ep | " + " | ".join(channels) + " |",
             "|" + "---|" * (4 + len(channels))]
    for cell, arms in sorted(table.items()):
        for arm, rates in sorted(arms.items()):
            values = [f"{_pct(rates['per_call'][c])} ({rates['counts'][c]}; "
                      f"{_pct(rates['per_episode'][c])} ep)" for c in channels]
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
    for cell in sorted(summary["success_at_k"]):
        arms = summary["success_at_k"][cell]
        parts = []
        for arm in ("off", "on"):
            if arm in arms:
                parts.append(f"with repair {arm}, success is {_pct(arms[arm]['10']['rate'])} at "
                             f"K=10 and {_pct(arms[arm]['2']['rate'])} at K=2")
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
        else:
            text += " Reference precision."
        effect = summary["repair_effect"].get(cell, {}).get("2")
        if effect:
            text += (f" Repair changed success at K=2 by {_pct(effect['difference'])} "
                     f"[{_pct(effect['low'])}, {_pct(effect['high'])}] over "
                     f"{effect['pairs']} paired episodes.")
        repairs = summary["repairs"][cell].get("on")
        if repairs and repairs["attempted"]:
            text += (f" reflexguard repaired {repairs['succeeded']} of {repairs['attempted']} "
                     f"invalid replies ({repairs['extra_upstream_calls']} extra calls).")
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
    lines += ["## Success at every error budget", "",
              "Recomputed exactly from one run at K=10: reward 1 and fewer than K error tool "
              "messages. Wilson 95% intervals. Infrastructure errors and episode timeouts count "
              "as failures.", ""]
    lines += _success_table(summary) + [""]
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
                     f"{_pct(names['share_new'])} |")
    lines += ["", "## Recovery and repairs", "",
              "| cell | repair | recovered within 2 turns | repairs attempted | succeeded | "
              "extra upstream calls |", "|---|---|---|---|---|---|"]
    for cell, arms in sorted(summary["recovery"].items()):
        for arm, rate in sorted(arms.items()):
            repairs = summary["repairs"][cell][arm]
            lines.append(f"| {cell} | {arm} | {_ci(rate)} | {repairs['attempted']} | "
                         f"{repairs['succeeded']} | {repairs['extra_upstream_calls']} |")
    lines += ["", "## Repair effect (on − off, paired by task and trial, bootstrap 95% CI)", "",
              "| cell | K=1 | K=2 | K=5 | K=10 |", "|---|---|---|---|---|"]
    for cell, effects in sorted(summary["repair_effect"].items()):
        row = [f"{_pct(effects[k]['difference'])} [{_pct(effects[k]['low'])}, "
               f"{_pct(effects[k]['high'])}]" if k in effects else "–"
               for k in ("1", "2", "5", "10")]
        lines.append(f"| {cell} | " + " | ".join(row) + " |")
    lines += ["", "## Termination reasons", "",
              "`infrastructure_error` (a crash) and `episode_timeout` (the wall-clock limit, "
              "`--episode-timeout`) are failures whatever the partial trajectory did.", ""]
    lines += _termination_table(summary["termination"])
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    lines += ["Damage rule: a lower-precision cell is damaged when any environment channel's "
              "per-call error rate is higher than its reference's by a one-sided Fisher exact "
              "test with Holm correction over all cells × channels at α=0.05 "
              "(docs/bench.md).", ""]
    return "\n".join(lines)


def build_report(out: Path, max_errors: int = 10) -> dict[str, Any]:
    records: list[EpisodeRecord] = RecordStore(out / "episodes.jsonl").load()
    if not records:
        raise FileNotFoundError(f"no episodes in {out / 'episodes.jsonl'}")
    summary = summarise(records, max_errors)
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
    parser.add_argument("--max-errors", type=int, default=10)
    args = parser.parse_args()
    try:
        build_report(args.run, args.max_errors)
    except (FileNotFoundError, ValueError) as exc:
        print(f"bench.report.writer: error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"report written to {args.run / 'report.md'}")


if __name__ == "__main__":
    main()
