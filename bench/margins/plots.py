"""The study's PNG plots (matplotlib, Agg), drawn from the summary alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.margins.runner import REFERENCE
from bench.report.figure import plt, save


def _errorbar(rate: dict[str, Any]) -> tuple[float, float, float]:
    value = rate["rate"] or 0.0
    return value, value - (rate["low"] or 0.0), (rate["high"] or 0.0) - value


def rates(summary: dict[str, Any], path: Path) -> None:
    """Exact match of the gold tool name and the error channels, per precision."""
    variants = summary["variants"]
    channels = sorted({c for v in variants for c in summary["per_variant"][v]["channels"]})
    empty = {"rate": 0.0, "low": 0.0, "high": 0.0, "n": 0}

    def rate_of(variant: str, name: str) -> dict[str, Any]:
        found = summary["per_variant"][variant]
        if name == "gold name":
            result: dict[str, Any] = found["exact_match"]
            return result
        return dict(found["channels"].get(name, empty))

    series = ["gold name", *channels]
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(series), 3.8))
    width = 0.8 / max(1, len(variants))
    for i, variant in enumerate(variants):
        n = summary["per_variant"][variant]["decisions"]
        values = [_errorbar(rate_of(variant, name)) for name in series]
        xs = [j + (i - (len(variants) - 1) / 2) * width for j in range(len(series))]
        ax.bar(xs, [v[0] for v in values], width, label=f"{variant} (n={n})",
               yerr=[[v[1] for v in values], [v[2] for v in values]], capsize=2)
    ax.set_xticks(range(len(series)), series, rotation=25, fontsize=8,
                  ha="right")
    ax.set_ylabel("share of decisions (Wilson 95% CI)")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7)
    ax.set_title("Teacher-forced next call: gold name and channels per precision", fontsize=9)
    save(fig, path)


def deciles(summary: dict[str, Any], path: Path) -> None:
    """Flip rate vs the reference's name margin, per margin decile, per candidate."""
    candidates = sorted(summary["candidates"])
    fig, axes = plt.subplots(1, max(1, len(candidates)), squeeze=False,
                             figsize=(4.6 * max(1, len(candidates)), 3.6))
    for ax, candidate in zip(axes[0], candidates, strict=False):
        found = summary["candidates"][candidate]
        bins = [b for b in found["deciles"] if b["n"]]
        xs = list(range(len(bins)))
        values = [_errorbar(b["flip_rate"]) for b in bins]
        ax.errorbar(xs, [v[0] for v in values], yerr=[[v[1] for v in values],
                    [v[2] for v in values]], fmt="o-", capsize=3, label="flip")
        errors = [_errorbar(b["error_rate"]) for b in bins]
        ax.errorbar([x + 0.1 for x in xs], [v[0] for v in errors],
                    yerr=[[v[1] for v in errors], [v[2] for v in errors]], fmt="s--",
                    capsize=3, alpha=0.6, label="error")
        labels = [f"<{b['hi']:.2g}" if isinstance(b["hi"], float) else f">={b['lo']:.2g}"
                  for b in bins]
        ax.set_xticks(xs, labels, rotation=45, fontsize=7)
        auc = found["name_margin"]["flip"]
        auc_text = (f"AUROC {auc['auroc']:.2f} [{auc['low']:.2f}, {auc['high']:.2f}]"
                    if auc["auroc"] is not None and auc["low"] is not None else "AUROC n/a")
        ax.set_title(f"{candidate} vs {REFERENCE}: n={found['name_margin']['measured']}, "
                     f"{auc_text}", fontsize=8)
        ax.set_xlabel(f"{REFERENCE} name margin decile (nats)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("rate (Wilson 95% CI)")
    save(fig, path)


def draw_all(summary: dict[str, Any], out: Path) -> None:
    rates(summary, out / "rates.png")
    if summary["candidates"]:
        deciles(summary, out / "flip_deciles.png")
