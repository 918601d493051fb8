"""The BFCL report's injected-faults section and plot, from the summary alone (none:
nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report.figure import plt, save
from bench.stats.faults import fault_label

CHANNELS = ("unknown_tool", "malformed_args", "schema_violation", "any")
NOTE = ("> **INJECTED** cells (`+inject:SPEC`) ran with reflexguard damaging a seeded share "
        "of the model's tool calls on purpose (`--inject-faults`, simulated damage; "
        "docs/bench.md). The damage is the same on both arms' first answers; every re-ask "
        "went to the real model, and BFCL's own checker scored the answers. **natural** = "
        "faults the model made by itself.")


def _r(entry: dict[str, Any] | None) -> str:
    if not entry or entry["rate"] is None:
        return "–"
    return (f"{entry['successes']}/{entry['n']} {100 * entry['rate']:.0f}% "
            f"[{100 * entry['low']:.0f}, {100 * entry['high']:.0f}]")


def bfcl_fault_lines(summary: dict[str, Any]) -> list[str]:
    faults = summary.get("faults") or {}
    if not faults:
        return []
    lines = ["## INJECTED faults: what repair turns into a correct answer", "", NOTE, "",
             "Share of cases whose on-arm answer BFCL accepts, among cases with an INJECTED "
             "fault on a first answer (by channel), and among cases whose first answer had "
             "a natural fault (in the injected cell, and in its natural cell). Wilson 95%.",
             "", "| cell | category | pairs | INJECTED cases | "
             + " | ".join(f"INJECTED {c} → correct" for c in CHANNELS)
             + " | natural → correct (same cell) | natural → correct (natural cell) | "
               "accuracy off → on | fixed | broken (INJECTED / not) |",
             "|---|---|---|---|" + "---|" * len(CHANNELS) + "---|---|---|---|---|"]
    for cell, entry in sorted(faults.items()):
        for category, row in entry["categories"].items():
            inj, nat = row["injected_cell"], row["natural_cell"]
            by = inj["injected_repaired_correct"]
            lines.append(
                f"| {cell.split('@', 1)[-1]} | {category} | {inj['pairs']} | "
                f"{inj['injected_cases']} | " + " | ".join(_r(by.get(c)) for c in CHANNELS)
                + f" | {_r(inj['natural_repaired_correct'])} | "
                f"{_r(nat['natural_repaired_correct']) if nat else '–'} | "
                f"{_r(inj['off_correct'])} → {_r(inj['on_correct'])} | {inj['fixed']} | "
                f"{inj['broken_with_injected_fault']} / {inj['broken_without']} |")
    return [*lines, ""]


def _bar(ax: Any, x: float, entry: dict[str, Any] | None, width: float, **style: Any) -> None:
    if not entry or entry["rate"] is None:
        return
    ax.bar([x], [entry["rate"]], width, yerr=[[entry["rate"] - entry["low"]],
                                              [entry["high"] - entry["rate"]]],
           capsize=2, **style)


def fault_plot(summary: dict[str, Any], path: Path) -> bool:
    """Per category (a row each): accuracy natural / INJECTED off / INJECTED on for each
    injected cell, and the share of INJECTED and natural faults repair turned correct."""
    faults = summary.get("faults") or {}
    cells = sorted(faults)
    categories = list(dict.fromkeys(cat for c in cells for cat in faults[c]["categories"]))
    if not cells or not categories:
        return False
    fig, axes = plt.subplots(len(categories), 2, figsize=(max(7.0, 2.2 * len(cells) + 3),
                                                          3.4 * len(categories)),
                             squeeze=False)
    # The report's own name for each cell's damage ("INJECTED unknown_tool=0.4"), wrapped.
    labels = [fault_label(c.split("@", 1)[-1]).replace(" ", "\n", 1).replace(",", ",\n")
              for c in cells]
    for row, category in zip(axes, categories, strict=True):
        accuracy, repaired = row
        for i, cell in enumerate(cells):
            entry = faults[cell]["categories"].get(category)
            if not entry:
                continue
            inj, nat = entry["injected_cell"], entry["natural_cell"]
            first = i == 0
            _bar(accuracy, i - 0.27, nat["off_correct"] if nat else None, 0.26,
                 color="#9aa5b1", label="natural, repair off" if first else None)
            _bar(accuracy, i, inj["off_correct"], 0.26, color="#e08a3c",
                 label="INJECTED, repair off" if first else None)
            _bar(accuracy, i + 0.27, inj["on_correct"], 0.26, color="#1f77b4",
                 label="INJECTED, repair on" if first else None)
            _bar(repaired, i - 0.2, inj["injected_repaired_correct"].get("any"), 0.38,
                 color="#1f77b4", label="INJECTED faults" if first else None)
            _bar(repaired, i + 0.2, inj["natural_repaired_correct"], 0.38, color="#9aa5b1",
                 hatch="//", label="natural faults (same cases)" if first else None)
        for ax, title in ((accuracy, "BFCL accuracy"),
                          (repaired, "faulty first answers repaired into a correct one")):
            ax.set_xticks(range(len(cells)))
            ax.set_xticklabels(labels, fontsize=7)
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{category}: {title}", fontsize=9)
            ax.legend(fontsize=7)
        accuracy.set_ylabel("share (Wilson 95% CI)")
    fig.suptitle("INJECTED faults (simulated damage) on a real model, repaired by re-asking it",
                 fontsize=10)
    save(fig, path)
    return True
