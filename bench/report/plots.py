"""The report's PNG plots, drawn from the summary with matplotlib's Agg backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.records import ENV_CHANNELS
from bench.report.faults import masking_plot
from bench.report.figure import plt, save

# (arm, line style, marker, x shift): equal curves stay visible side by side.
ARM_STYLES = (("off", "--", "o", -0.12), ("on", "-", "s", 0.0), ("on+budget", ":", "^", 0.12),
              ("on+stop", "-.", "D", 0.24))


def success_curves(summary: dict[str, Any], path: Path, tag: str) -> None:
    cells = sorted(summary["success_at_k"])
    fig, axes = plt.subplots(1, max(1, len(cells)), figsize=(4.2 * max(1, len(cells)), 3.6),
                             squeeze=False)
    for ax, cell in zip(axes[0], cells, strict=False):
        for arm, style, marker, shift in ARM_STYLES:
            curve = summary["success_at_k"][cell].get(arm)
            if not curve:
                continue
            ks = sorted(int(k) for k in curve)
            xs = [k + shift for k in ks]
            rates = [curve[str(k)]["rate"] or 0 for k in ks]
            lows = [curve[str(k)]["low"] or 0 for k in ks]
            highs = [curve[str(k)]["high"] or 0 for k in ks]
            ax.plot(xs, rates, style, marker=marker, markerfacecolor="none" if arm == "off"
                    else None, label=f"repair {arm}")
            ax.fill_between(xs, lows, highs, alpha=0.12)
        ax.set_title(cell, fontsize=8)
        ax.set_xlabel("error budget K")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("success (Wilson 95% CI)")
    fig.suptitle(f"Success vs error budget{tag}", fontsize=10)
    save(fig, path)


def channel_bars(summary: dict[str, Any], path: Path, tag: str) -> None:
    cells = sorted(summary["env_channels"])
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(ENV_CHANNELS) + 2), 3.8))
    width = 0.8 / max(1, len(cells))
    for i, cell in enumerate(cells):
        arm = next(a for a, *_ in ARM_STYLES if a in summary["env_channels"][cell])
        rates = summary["env_channels"][cell][arm]["per_call"]
        xs = [j + i * width for j in range(len(ENV_CHANNELS))]
        ax.bar(xs, [rates.get(c) or 0 for c in ENV_CHANNELS], width,
               label=f"{cell} (repair {arm})")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(ENV_CHANNELS))])
    ax.set_xticklabels(ENV_CHANNELS, fontsize=8)
    ax.set_ylabel("errors per tool call")
    ax.legend(fontsize=7)
    ax.set_title(f"Channel error rates by precision{tag}", fontsize=10)
    save(fig, path)


def name_scatter(summary: dict[str, Any], path: Path, tag: str) -> None:
    fig, ax = plt.subplots(figsize=(5, 4.5))
    plotted = False
    for cell, names in sorted(summary["hallucinated_names"].items()):
        ref, low = names["reference_counts"], names["lower_counts"]
        keys = sorted(set(ref) | set(low))
        if not keys:
            continue
        plotted = True
        ax.scatter([ref.get(k, 0) for k in keys], [low.get(k, 0) for k in keys], label=cell)
        for k in keys:
            ax.annotate(k, (ref.get(k, 0), low.get(k, 0)), fontsize=6)
    top = ax.get_xlim()[1] if plotted else 1
    ax.plot([0, top], [0, top], ":", color="grey")
    ax.set_xlabel("count at the reference precision")
    ax.set_ylabel("count at the lower precision")
    ax.set_title(f"Hallucinated tool names{tag}" + ("" if plotted else " (none observed)"),
                 fontsize=10)
    if plotted:
        ax.legend(fontsize=7)
    save(fig, path)


def budget_bars(summary: dict[str, Any], path: Path, tag: str) -> None:
    """Episodes by errors spent, per arm: the distribution behind the mean."""
    cells = sorted(summary["budget_spent"])
    fig, axes = plt.subplots(1, max(1, len(cells)), figsize=(4.2 * max(1, len(cells)), 3.6),
                             squeeze=False)
    for ax, cell in zip(axes[0], cells, strict=False):
        arms = [a for a, *_ in ARM_STYLES if a in summary["budget_spent"][cell]]
        top = max((int(e) for a in arms for e in summary["budget_spent"][cell][a]
                   ["distribution"]), default=0)
        width = 0.8 / max(1, len(arms))
        for i, arm in enumerate(arms):
            counts = summary["budget_spent"][cell][arm]["distribution"]
            ax.bar([e + (i - (len(arms) - 1) / 2) * width for e in range(top + 1)],
                   [counts.get(str(e), 0) for e in range(top + 1)], width, label=arm)
        ax.set_title(cell, fontsize=8)
        ax.set_xlabel("errors that reached tau2 in the episode")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("episodes")
    fig.suptitle(f"Budget spent per episode{tag}", fontsize=10)
    save(fig, path)


def draw_all(summary: dict[str, Any], out: Path) -> list[str]:
    tag = " (SIMULATED agent)" if summary["simulated"] else ""
    files = {"success_vs_k.png": success_curves, "channel_rates.png": channel_bars,
             "hallucinated_names.png": name_scatter, "budget_spent.png": budget_bars}
    for name, draw in files.items():
        draw(summary, out / name, tag)
    drawn = list(files)
    if masking_plot(summary, out / "masking.png"):  # a run with INJECTED-faults cells
        drawn.append("masking.png")
    return drawn
