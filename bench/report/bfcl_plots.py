"""The BFCL report's PNG plots, drawn from its summary with matplotlib's Agg backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report.bfcl_faults import fault_plot
from bench.report.figure import plt, save
from bench.report.plots import name_scatter

ARM_COLOURS = {"off": "#9aa5b1", "on": "#1f77b4", "on+loop": "#2ca02c",
               "on+stop": "#d62728"}


def _short(cell: str) -> str:
    return cell.split("@", 1)[-1]


def accuracy_bars(summary: dict[str, Any], path: Path, tag: str) -> None:
    """Accuracy per category and arm, Wilson 95% intervals, one panel per cell."""
    cells, categories, arms = summary["cells"], summary["categories"], summary["arms"]
    fig, axes = plt.subplots(1, max(1, len(cells)), figsize=(1.1 * len(categories) * max(
        1, len(cells)) + 2, 3.8), squeeze=False, sharey=True)
    width = 0.8 / max(1, len(arms))
    for ax, cell in zip(axes[0], cells, strict=False):
        for i, arm in enumerate(arms):
            xs: list[float] = []
            ys: list[float] = []
            errs: list[list[float]] = [[], []]
            for j, cat in enumerate(categories):
                entry = summary["accuracy"][cat].get(cell, {}).get(arm)
                if not entry or entry["rate"] is None:
                    continue
                xs.append(j + (i - (len(arms) - 1) / 2) * width)
                ys.append(entry["rate"])
                errs[0].append(entry["rate"] - entry["low"])
                errs[1].append(entry["high"] - entry["rate"])
            ax.bar(xs, ys, width, yerr=errs, capsize=2, color=ARM_COLOURS.get(arm),
                   label=f"repair {arm}")
        ax.set_xticks(range(len(categories)))
        ax.set_xticklabels(categories, rotation=35, ha="right", fontsize=7)
        ax.set_title(_short(cell), fontsize=9)
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("BFCL accuracy (Wilson 95% CI)")
    fig.suptitle(f"BFCL accuracy by category, precision and arm{tag}", fontsize=10)
    save(fig, path)


def channel_bars(summary: dict[str, Any], path: Path, tag: str) -> None:
    """reflexguard's first-answer channel rates by precision (repair off: nothing hidden)."""
    cells = [c for c in summary["cells"] if "off" in summary["channels"].get(c, {})]
    channels = sorted({ch for c in cells for ch, n in summary["channels"][c]["off"]
                       ["counts"].items() if n}) or ["unknown_tool"]
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(channels) + 2), 3.8))
    width = 0.8 / max(1, len(cells))
    for i, cell in enumerate(cells):
        rates = summary["channels"][cell]["off"]["per_entry"]
        ax.bar([j + i * width for j in range(len(channels))],
               [rates.get(ch) or 0 for ch in channels], width, label=_short(cell))
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(channels))])
    ax.set_xticklabels(channels, fontsize=8)
    ax.set_ylabel("share of first-answer verdicts")
    ax.legend(fontsize=7)
    ax.set_title(f"Error channels by precision, repair off{tag}", fontsize=10)
    save(fig, path)


def repair_bars(summary: dict[str, Any], path: Path, tag: str) -> None:
    """Cases repair fixed (up) and broke (down), per category and cell."""
    cells = [c for c in summary["cells"] if c in summary["repair"]]
    categories = summary["categories"]
    fig, ax = plt.subplots(figsize=(1.1 * len(categories) + 3, 3.8))
    width = 0.8 / max(1, len(cells))
    for i, cell in enumerate(cells):
        xs = [j + i * width for j in range(len(categories))]
        rows = [summary["repair"][cell].get(cat) for cat in categories]
        ax.bar(xs, [len(r["fixed"]) if r else 0 for r in rows], width,
               label=f"{_short(cell)} fixed")
        ax.bar(xs, [-len(r["broken"]) if r else 0 for r in rows], width, hatch="//",
               label=f"{_short(cell)} broken")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(categories))])
    ax.set_xticklabels(categories, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("cases (on vs off, paired)")
    if cells:
        ax.legend(fontsize=7)
    ax.set_title(f"Cases fixed and broken by repair{tag}", fontsize=10)
    save(fig, path)


def draw_all(summary: dict[str, Any], out: Path) -> list[str]:
    tag = " (SIMULATED upstream)" if summary["simulated"] else ""
    files = {"bfcl_accuracy.png": accuracy_bars, "bfcl_channels.png": channel_bars,
             "bfcl_repair.png": repair_bars, "bfcl_wrong_names.png": name_scatter}
    for name, draw in files.items():
        draw(summary, out / name, tag)
    drawn = list(files)
    if fault_plot(summary, out / "bfcl_faults.png"):  # a run with INJECTED-faults cells
        drawn.append("bfcl_faults.png")
    return drawn
