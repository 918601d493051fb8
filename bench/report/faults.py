"""The report's injected-faults sections and the masking plot, from the summary alone.

Every figure that comes from injected damage is labelled INJECTED; the natural cell's
errors are the model's own. Nothing is printed when the run has no injected cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report.figure import plt, save

INJECTED_NOTE = (
    "> **INJECTED** rows are cells whose reflexguard damaged a seeded share of the model's "
    "tool calls on purpose (`--inject-faults`, simulated damage; docs/bench.md, \"Injected "
    "faults\"). The model behind them is real, and so is every re-ask it answers. "
    "**natural** = the errors the model made by itself. The off and on arms of one task and "
    "trial saw the same injected faults on their first answers.")
ARMS = ("off", "on", "on+budget", "on+stop")


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.1f}%"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{c} {n}" for c, n in sorted(counts.items())) or "0"


def _mean(entry: dict[str, Any]) -> str:
    if entry["mean"] is None:
        return "–"
    return f"{entry['mean']:.2f} [{entry['low']:.2f}, {entry['high']:.2f}]"


def fault_lines(summary: dict[str, Any]) -> list[str]:
    faults = summary.get("faults") or {}
    if not faults:
        return []
    lines = ["## Injected faults beside natural errors", "", INJECTED_NOTE, "",
             "| cell | repair | episodes | INJECTED on first answers | INJECTED on re-asks | "
             "natural first-answer errors | INJECTED answers repaired [95% CI] | INJECTED "
             "reaching the agent | env errors INJECTED / natural | crashes INJECTED / "
             "natural |", "|---|---|---|---|---|---|---|---|---|---|"]
    for cell, arms in sorted(faults["cells"].items()):
        for arm in [a for a in ARMS if a in arms]:
            row = arms[arm]
            share = row["repaired_share"]
            repaired = "– (repair off)" if arm == "off" else "–" if share["rate"] is None else (
                f"{row['repaired']}/{share['n']} = {_pct(share['rate'])} "
                f"[{_pct(share['low'])}, {_pct(share['high'])}]")
            lines.append(
                f"| {cell} | {arm} | {row['episodes']} | {_counts(row['injected_first'])} | "
                f"{_counts(row['injected_reasks'])} | {_counts(row['natural_first'])} | "
                f"{repaired} | {row['passed_on']} | {row['env_errors']['injected']} / "
                f"{row['env_errors']['natural']} | {row['infrastructure_errors']['injected']}"
                f" / {row['infrastructure_errors']['natural']} |")
    lines += ["", "## The masking: success at every K by injected rate", "",
              "Scored episodes, Wilson 95% intervals. The paper's masking: the score at K=10 "
              "stays flat while the score at small K falls as the error rate grows. "
              "`K10 − K2` is the gap the budget hides.", ""]
    budgets = faults["budgets"]
    for base, arms in sorted(faults["masking"].items()):
        order = {label: (entry["rate"], label) for arm in arms.values()
                 for label, entry in arm.items()}
        rates = sorted(order, key=lambda label: order[label])
        lines += [f"**{base}**", "", "| repair | K | " + " | ".join(rates)
                  + " |", "|---|---|" + "---|" * len(rates)]
        for arm in [a for a in ARMS if a in arms]:
            for k in [*budgets, "K10 − K2"]:
                values = []
                for rate in rates:
                    entry = arms[arm].get(rate)
                    if entry is None:
                        values.append("–")
                    elif k == "K10 − K2":
                        hi, lo = entry["success"].get("10"), entry["success"].get("2")
                        values.append("–" if not hi or not lo or hi["rate"] is None else
                                      f"{100 * (hi['rate'] - lo['rate']):+.1f} pts")
                    else:
                        s = entry["success"].get(str(k))
                        values.append("–" if s is None or s["rate"] is None else
                                      f"{s['successes']}/{s['n']} {_pct(s['rate'])} "
                                      f"[{_pct(s['low'])}, {_pct(s['high'])}]")
                label = k if isinstance(k, str) else f"K={k}"
                lines.append(f"| {arm} | {label} | " + " | ".join(values) + " |")
        lines.append("")
    lines += _recovery_lines(summary, faults) + _cost_lines(faults)
    return lines


def _recovery_lines(summary: dict[str, Any], faults: dict[str, Any]) -> list[str]:
    lines = ["## What repair recovers at each K, by injected rate", "",
             "Success with repair on minus off, paired by task and trial (bootstrap 95% CI).",
             "", "| cell | rate | " + " | ".join(f"K={k}" for k in faults["budgets"]) + " |",
             "|---|---|" + "---|" * len(faults["budgets"])]
    for cell, arms in sorted(faults["cells"].items()):
        effect = summary.get("arm_effects", {}).get(cell, {}).get("on − off")
        if not effect:
            continue
        label = next(iter(arms.values()))["label"]
        values = []
        for k in faults["budgets"]:
            e = effect.get(str(k))
            values.append("–" if not e or e["difference"] is None else
                          f"{100 * e['difference']:+.1f} [{100 * e['low']:+.1f}, "
                          f"{100 * e['high']:+.1f}]")
        lines.append(f"| {cell} | {label} | " + " | ".join(values) + " |")
    return [*lines, ""]


def _cost_lines(faults: dict[str, Any]) -> list[str]:
    lines = ["## The cost per injected rate", "",
             "Per episode, mean [bootstrap 95% CI]: extra upstream calls (re-asks and "
             "constrained attempts), tokens the agent's calls reported (every attempt "
             "summed), wall-clock seconds.", "",
             "| cell | rate | repair | extra upstream calls | tokens | seconds |",
             "|---|---|---|---|---|---|"]
    for cell, arms in sorted(faults["cells"].items()):
        for arm in [a for a in ARMS if a in arms]:
            row = arms[arm]
            lines.append(f"| {cell} | {row['label']} | {arm} | "
                         f"{_mean(row['extra_upstream_calls'])} | {_mean(row['tokens'])} | "
                         f"{_mean(row['seconds'])} |")
    return [*lines, ""]


def masking_plot(summary: dict[str, Any], path: Path) -> bool:
    """Success vs K, one line per injected rate, one panel per natural cell and arm."""
    faults = summary.get("faults") or {}
    panels = [(base, arm) for base, arms in sorted(faults.get("masking", {}).items())
              for arm in ARMS if arm in arms]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (base, arm) in zip(axes[0], panels, strict=True):
        for label, entry in sorted(faults["masking"][base][arm].items(),
                                   key=lambda item: (item[1]["rate"], item[0])):
            ks = sorted(int(k) for k in entry["success"])
            rates = [entry["success"][str(k)]["rate"] or 0 for k in ks]
            ax.plot(ks, rates, "-" if entry["rate"] == 0 else "--", marker="o", label=label)
            ax.fill_between(ks, [entry["success"][str(k)]["low"] for k in ks],
                            [entry["success"][str(k)]["high"] for k in ks], alpha=0.1)
        ax.set_title(f"{base}, repair {arm}", fontsize=8)
        ax.set_xlabel("error budget K")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("success (Wilson 95% CI)")
    fig.suptitle("Success vs K by INJECTED fault rate (simulated damage, real repair)",
                 fontsize=10)
    save(fig, path)
    return True
