"""The BFCL report: `summary.json`, `report.md`, `report.html` and PNG plots, rebuilt from
`cases.jsonl` alone (`python -m bench.bfcl.report RUN`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report.bfcl_faults import bfcl_fault_lines
from bench.report.bfcl_plots import draw_all
from bench.report.writer import percent, to_html
from bench.stats.bfcl_records import CaseRecord
from bench.stats.bfcl_summary import summarise
from bench.stats.bfcl_trajectory import trajectory_table

NOTE = (
    "Generation and scoring are BFCL's own (bfcl-eval 2026.3.23: its OpenAI-compatible "
    "chat-completions function-calling handler, its AST, relevance and multi-turn "
    "checkers), run from .venv-bfcl and pointed at reflexguard. `off` = reflexguard in "
    "observe mode (calls the model writes as text are lifted, as a server's tool parser "
    "would; nothing is repaired); `on` = the repair ladder. The model server caps a request "
    "without `max_tokens` (BFCL sends none) at the run's generation cap, in both arms. "
    "There is no BF16 here: amplification is lower-bit against Q4_K_M as shipped."
)


def _ci(entry: dict[str, Any] | None) -> str:
    if not entry or entry["rate"] is None:
        return "–"
    return (f"{percent(entry['rate'])} [{percent(entry['low'])}, {percent(entry['high'])}] "
            f"({entry['correct']}/{entry['n']})")


def _p(value: Any) -> str:
    return "–" if value is None else f"{float(value):.3g}"


def _short(cell: str) -> str:
    return cell.split("@", 1)[-1]


def _ratio(entry: dict[str, Any] | None) -> str:
    if not entry or entry["ratio"] is None:
        return "–"
    def fmt(v: Any) -> str:
        return "∞" if v == "inf" else ("–" if v is None else f"{float(v):.2f}")
    return (f"×{fmt(entry['ratio'])} [{fmt(entry['low'])}, {fmt(entry['high'])}] "
            f"({entry['reference_count']}→{entry['lower_count']})")


def main_table(summary: dict[str, Any]) -> list[str]:
    """Category × cell × arm: accuracy, the paired on − off difference, fixed/broken."""
    lines = ["| category | cell | n | off | on | on − off | McNemar p | Holm p | fixed | "
             "broken |", "|---|---|---|---|---|---|---|---|---|---|"]
    for cat in summary["categories"]:
        for cell in summary["cells"]:
            acc = summary["accuracy"][cat].get(cell, {})
            if not acc:
                continue
            rep = summary["repair"].get(cell, {}).get(cat)
            n = max(e["n"] for e in acc.values())
            diff = (f"{100 * rep['difference']:+.1f} pts" if rep and rep["difference"]
                    is not None else "–")
            lines.append(
                f"| {cat} | {_short(cell)} | {n} | {_ci(acc.get('off'))} | {_ci(acc.get('on'))} "
                f"| {diff} | {_p(rep['p_value']) if rep else '–'} | "
                f"{_p(rep['holm_p']) if rep else '–'} | {len(rep['fixed']) if rep else '–'} | "
                f"{len(rep['broken']) if rep else '–'} |")
    return lines


def _overall(summary: dict[str, Any]) -> list[str]:
    lines = ["| cell | " + " | ".join(f"repair {a}" for a in summary["arms"]) + " |",
             "|---|" + "---|" * len(summary["arms"])]
    for cell in summary["cells"]:
        lines.append(f"| {_short(cell)} | " + " | ".join(
            _ci(summary["overall"][cell].get(a)) for a in summary["arms"]) + " |")
    return lines


def _channels(summary: dict[str, Any]) -> list[str]:
    channels: list[str] = []
    for arms in summary["channels"].values():
        for rates in arms.values():
            channels = list(rates["per_entry"])
    lines = ["| cell | repair | requests | verdicts | " + " | ".join(channels) + " |",
             "|---|---|---|---|" + "---|" * len(channels)]
    for cell in summary["cells"]:
        for arm, rates in summary["channels"].get(cell, {}).items():
            lines.append(f"| {_short(cell)} | {arm} | {rates['requests']} | {rates['entries']} | "
                         + " | ".join(f"{percent(rates['per_entry'][ch])} ({rates['counts'][ch]})"
                                      for ch in channels) + " |")
    return lines


def _amplification(summary: dict[str, Any]) -> list[str]:
    rows = summary["amplification"]
    if not rows:
        return ["No lower precision ran with its reference in the observe arm.", ""]
    channels = list(next(iter(rows.values()))["channels"])
    lines = ["| lower cell | " + " | ".join(channels) + " |", "|---|" + "---|" * len(channels)]
    for cell, entry in rows.items():
        lines.append(f"| {_short(cell)} vs {_short(entry['reference'])} | "
                     + " | ".join(_ratio(entry["channels"][ch]) for ch in channels) + " |")
    return lines + [""]


def _damage(summary: dict[str, Any]) -> list[str]:
    if not summary["damage"]:
        return ["No lower precision ran with its reference in the observe arm.", ""]
    lines = ["| lower cell | category | reference correct | lower correct | pairs | lost | won | "
             "one-sided p | Holm p | damaged |", "|---|---|---|---|---|---|---|---|---|---|"]
    for t in summary["damage"]:
        lines.append(f"| {_short(t['cell'])} | {t['category']} | {t['reference_correct']} | "
                     f"{t['lower_correct']} | {t['pairs']} | {t['lost']} | {t['won']} | "
                     f"{_p(t['p_value'])} | {_p(t['holm_p'])} | {t['damaged']} |")
    rec = summary["recovery"]
    lines += ["", "Repair's recovery, pooled over (cell, category) pairs by damage status "
              "(reference cells count as undamaged):", "",
              "| pairs | cases | fixed | broken | net |", "|---|---|---|---|---|"]
    for label, entry in rec.items():
        lines.append(f"| {label} | {entry['pairs']} | {entry['fixed']} | {entry['broken']} | "
                     f"{percent(entry['difference'])} |")
    return lines + [""]


def _names(summary: dict[str, Any]) -> list[str]:
    lines = ["| lower cell | distinct wrong names | Spearman ρ | p | wrong names at lower | "
             "new at lower | share new |", "|---|---|---|---|---|---|---|"]
    for cell, n in summary["hallucinated_names"].items():
        lines.append(f"| {_short(cell)} | {n['names']} | {_p(n['spearman'])} | "
                     f"{_p(n['p_value'])} | {n['lower_hallucinations']} | {n['lower_new']} | "
                     f"{percent(n['share_new'])} |")
    return lines + ["", "ρ needs at least 3 distinct names; '–' when fewer were seen.", ""]


def _cases(summary: dict[str, Any]) -> list[str]:
    lines = []
    for cell, cats in summary["repair"].items():
        for cat, rep in cats.items():
            if rep["fixed"] or rep["broken"]:
                lines.append(f"- {_short(cell)}, {cat}: fixed {', '.join(rep['fixed']) or '–'}; "
                             f"broken {', '.join(rep['broken']) or '–'}")
    return (lines or ["No case changed between the arms."]) + [""]


def _irrelevance(summary: dict[str, Any]) -> list[str]:
    if not summary["irrelevance"]:
        return ["irrelevance was not run in both arms.", ""]
    lines = ["| cell | off correct | on correct | pairs | McNemar p | verdict |",
             "|---|---|---|---|---|---|"]
    for cell, e in summary["irrelevance"].items():
        lines.append(f"| {_short(cell)} | {e['baseline_correct']} | {e['treated_correct']} | "
                     f"{e['pairs']} | {_p(e['p_value'])} | {e['verdict']} |")
    return lines + [""]


def _effect(e: dict[str, Any] | None, unit: str = "") -> str:
    if not e or e["mean"] is None:
        return "–"
    return f"{e['mean']:+.2f}{unit} [{e['low']:+.2f}, {e['high']:+.2f}]"


def _cost(summary: dict[str, Any]) -> list[str]:
    lines = ["| cell | cases (on) | with extra calls | extra upstream calls per case | "
             "input tokens on − off | output tokens on − off | upstream calls on − off | "
             "seconds on − off | outcomes (on) |", "|---|---|---|---|---|---|---|---|---|"]
    for cell, c in summary["cost"].items():
        d = c["on_minus_off"]
        outcomes = ", ".join(f"{k} {v}" for k, v in c["outcomes"].items()) or "–"
        lines.append(f"| {_short(cell)} | {c['cases']} | {c['cases_with_extra_calls']} | "
                     f"{_effect(c['extra_calls_per_case'])} | {_effect(d['input_tokens'])} | "
                     f"{_effect(d['output_tokens'])} | {_effect(d['upstream_calls'])} | "
                     f"{_effect(d['latency_s'], ' s')} | {outcomes} |")
    return lines + [""]


def render(summary: dict[str, Any], plots: list[str]) -> str:
    simulated = summary["simulated"]
    lines = ["# reflexguard on BFCL" + (" — SIMULATED UPSTREAM" if simulated else ""), ""]
    if simulated:
        lines += ["> Every answer here came from a **scripted fake upstream**, not a model.", ""]
    sample = ", ".join(f"{cat} {n}" for cat, n in summary["sample"].items())
    lines += [f"- cases scored: {summary['cases']} (per cell and arm: {sample})",
              "- cells: " + "; ".join(f"`{_short(c)}` = {summary['labels'][c]}"
                                     for c in summary["cells"]),
              "- inference errors recorded by BFCL (scored wrong): " + "; ".join(
                  f"{_short(c)} " + ", ".join(f"{a} {n}" for a, n in arms.items())
                  for c, arms in summary["inference_errors"].items()), "", NOTE, ""]
    lines += ["## Accuracy by BFCL's checker", "",
              "Wilson 95% intervals; on − off paired on the same cases, exact McNemar, Holm "
              "across categories within a cell.", ""] + main_table(summary) + [""]
    lines += ["All categories pooled over cases (so weighted by each category's sample):",
              ""] + _overall(summary) + [""]
    lines += bfcl_fault_lines(summary)  # INJECTED faults beside natural ones; none: nothing
    lines += ["## irrelevance: never worse than no guard?", ""] + _irrelevance(summary)
    lines += ["## Cases fixed and broken by repair", ""] + _cases(summary)
    lines += ["## Damaged cells (lower precision against the reference, repair off)", "",
              "One-sided exact McNemar (the lower precision loses more cases than it wins), "
              "Holm over every lower cell × category, α = 0.05.", ""] + _damage(summary)
    lines += ["## Error channels (reflexguard's reading of each request's first answer)", "",
              "Share of first-answer verdicts (one per call, one for a reply without a "
              "call) and their count.", ""] + _channels(summary) + [""]
    lines += ["## Amplification from the reference (repair off)", "",
              "Per-verdict rate at the lower precision over the reference's, with a bootstrap "
              "95% CI over cases (resampled jointly in both cells); counts reference→lower.",
              ""] + _amplification(summary)
    lines += ["## Hallucinated tool names", ""] + _names(summary)
    lines += ["## Cost of repair", "",
              "Per case; tokens as the client was billed (reflexguard sums every attempt's "
              "usage), paired on − off with bootstrap 95% CIs. Seconds compare arms that ran "
              "at different times on a shared machine: read them as load, not as cost.",
              ""] + _cost(summary)
    lines += ["## Multi-turn trajectories", "",
              "Over the multi-turn cases: cases BFCL force-terminated at its step limit, "
              "requests and input tokens per case as billed, and the loop guard's repeated "
              "calls by what it did (`on+loop`: the ladder and `loop_guard: repair`; "
              "`on+stop`: the ladder and `loop_guard: stop`).", ""
              ] + trajectory_table(summary.get("trajectories", {}))
    agreement = "; ".join(f"{_short(c)} {_ci(r)}" for c, r in summary["agreement"].items())
    lines += ["## Determinism floor", "",
              "Cases where repair changed nothing (every request clean or observed, no extra "
              f"call) whose saved answers are identical in both arms: {agreement or '–'}. "
              "Only arms that both asked the model count.", ""]
    shared = {c: n for c, n in summary.get("shared_first_answers", {}).items() if n}
    if shared:
        lines += ["On-arm cases whose first attempt was shared with the off arm (run with "
                  "`--share-first-answers`: the same request, byte for byte, answered once; "
                  "allowed only after 50+ independent cases agreed, as above): "
                  + "; ".join(f"{_short(c)} {n}" for c, n in shared.items())
                  + ". Their seconds are left out of the cost.", ""]
    lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def build_bfcl_report(out: Path) -> dict[str, Any]:
    path = out / "cases.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no cases in {path}")
    records = [CaseRecord.model_validate_json(line)
               for line in path.read_text().splitlines() if line.strip()]
    if not records:
        raise FileNotFoundError(f"no cases in {path}")
    summary = summarise(records)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plots = draw_all(summary, out)
    markdown = render(summary, plots)
    (out / "report.md").write_text(markdown)
    (out / "report.html").write_text(to_html(markdown, summary["simulated"]))
    return summary
