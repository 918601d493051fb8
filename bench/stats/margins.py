"""The margins study's statistics. Pure functions over decision rows: no files, no model.

A row is one teacher-forced decision at one precision. The reference precision's name
margin is the predictor; the outcome at a candidate precision is a **flip** (its chosen
tool name differs from the reference's) or an **error** (its call is invalid in any
channel, or names another tool than the gold action).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.stats.analysis import NameOverlap, Rate, name_overlap, wilson
from reflexguard.core import screen

RESAMPLES = 2000
DECILES = 10
CALIBRATION_BINS = 5


@dataclass(frozen=True)
class Row:
    variant: str
    domain: str
    task_id: str
    step: int
    gold_name: str
    chosen_name: str | None  # the first call's name; None for a reply without a call
    channel: str  # reflexguard's channel of the first call, or "no_call" / "empty_reply"
    name_margin: float | None
    call_margin: float | None
    seconds: float = 0.0
    first_of_task: bool = False

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.domain, self.task_id, self.step)

    @property
    def correct(self) -> bool:
        return self.chosen_name == self.gold_name

    @property
    def error(self) -> bool:
        """Invalid in any channel (a reply without a call included) or not the gold tool."""
        return self.channel != "ok" or not self.correct


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """P(score of a positive > score of a negative), ties count half (Mann-Whitney)."""
    values = np.asarray(scores, dtype=float)
    truth = np.asarray(labels, dtype=bool)
    positives, negatives = int(truth.sum()), int((~truth).sum())
    if positives == 0 or negatives == 0:
        return None
    order = values.argsort(kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    sorted_values = values[order]
    start = 0
    while start < len(values):  # average ranks over ties
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    rank_sum = float(ranks[truth].sum())
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


@dataclass(frozen=True)
class Interval:
    value: float | None
    low: float | None
    high: float | None
    n: int
    positives: int
    clusters: int


def bootstrap_auroc(scores: Sequence[float], labels: Sequence[bool], groups: Sequence[str],
                    resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """AUROC with a 95% percentile interval from resampling whole tasks (clusters):
    decisions of one task share a conversation, so they are not independent."""
    value = auroc(scores, labels)
    positives = sum(bool(x) for x in labels)
    clusters = sorted(set(groups))
    if value is None:
        return Interval(None, None, None, len(scores), positives, len(clusters))
    members: dict[str, list[int]] = {g: [] for g in clusters}
    for index, group in enumerate(groups):
        members[group].append(index)
    rng = np.random.default_rng(seed)
    score_array = np.asarray(scores, dtype=float)
    label_array = np.asarray(labels, dtype=bool)
    estimates = []
    for _ in range(resamples):
        picked = rng.integers(0, len(clusters), len(clusters))
        chosen = np.concatenate([members[clusters[p]] for p in picked]).astype(int)
        estimate = auroc(score_array[chosen].tolist(), label_array[chosen].tolist())
        if estimate is not None:
            estimates.append(estimate)
    if not estimates:
        return Interval(value, None, None, len(scores), positives, len(clusters))
    low, high = np.percentile(estimates, [2.5, 97.5])
    return Interval(value, float(low), float(high), len(scores), positives, len(clusters))


@dataclass(frozen=True)
class Bin:
    lo: float | None  # None: -inf
    hi: float | None  # None: +inf
    n: int
    flips: int
    errors: int

    @property
    def flip_rate(self) -> Rate:
        return wilson(self.flips, self.n)

    @property
    def error_rate(self) -> Rate:
        return wilson(self.errors, self.n)

    def holds(self, margin: float) -> bool:
        return (self.lo is None or margin >= self.lo) and (self.hi is None or margin < self.hi)


def quantile_edges(margins: Sequence[float], count: int) -> list[float]:
    """Inner edges splitting the margins into `count` groups of about equal size."""
    if not margins:
        return []
    ordered = sorted(float(m) for m in margins)
    # Observed values as edges (no interpolation), above the smallest: no bin is empty,
    # even when many margins are equal.
    cuts = {ordered[round(k * len(ordered) / count)] for k in range(1, count)
            if round(k * len(ordered) / count) < len(ordered)}
    return sorted(c for c in cuts if c > ordered[0])


def binned(margins: Sequence[float], flips: Sequence[bool], errors: Sequence[bool],
           edges: Sequence[float]) -> list[Bin]:
    """Bins [lo, hi) over the inner edges; the first is open below, the last above."""
    bounds: list[float | None] = [None, *edges, None]
    bins = []
    for lo, hi in itertools.pairwise(bounds):
        probe = Bin(lo, hi, 0, 0, 0)
        inside = [i for i, m in enumerate(margins) if probe.holds(m)]
        bins.append(Bin(lo, hi, len(inside), sum(bool(flips[i]) for i in inside),
                        sum(bool(errors[i]) for i in inside)))
    return bins


def brier(predictions: Sequence[float], labels: Sequence[bool]) -> float | None:
    pairs = [(p, float(y)) for p, y in zip(predictions, labels, strict=True) if not math.isnan(p)]
    if not pairs:
        return None
    return sum((p - y) ** 2 for p, y in pairs) / len(pairs)


def best_threshold(margins: Sequence[float], labels: Sequence[bool]) -> tuple[float, float] | None:
    """(threshold, Youden's J): flag margin < threshold as at risk; J = TPR - FPR, best."""
    positives = sum(bool(y) for y in labels)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return None
    best: tuple[float, float] | None = None
    for threshold in sorted(set(margins)) + [math.inf]:
        flagged = [m < threshold for m in margins]
        tpr = sum(f and y for f, y in zip(flagged, labels, strict=True)) / positives
        fpr = sum(f and not y for f, y in zip(flagged, labels, strict=True)) / negatives
        if best is None or tpr - fpr > best[1]:
            best = (threshold, tpr - fpr)
    return best


def held_out(task_id: str, domain: str, fraction: float = 0.5, salt: str = "margins") -> bool:
    """A fixed, seedless split of tasks: a hash of the task, so resuming or widening a run
    never moves a task between the fit and the held-out halves."""
    digest = hashlib.blake2b(f"{salt}/{domain}/{task_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


@dataclass(frozen=True)
class Calibration:
    bins: list[Bin]  # fitted on the fit tasks
    fit_n: int
    held_n: int
    held_flip_auroc: float | None
    held_error_auroc: float | None
    held_flip_brier: float | None
    held_error_brier: float | None
    base_flip_brier: float | None  # predicting the fit split's overall rate for everyone
    base_error_brier: float | None
    threshold: float | None  # best Youden threshold on the fit tasks
    threshold_held_j: float | None  # its J on the held-out tasks
    best_held_threshold: float | None  # the threshold that would have been best held out


@dataclass(frozen=True)
class Pair:
    """A decision at the reference and at a candidate precision."""

    reference: Row
    candidate: Row

    @property
    def flip(self) -> bool:
        return self.candidate.chosen_name != self.reference.chosen_name


def pairs(reference: Sequence[Row], candidate: Sequence[Row]) -> list[Pair]:
    by_key = {r.key: r for r in reference}
    return [Pair(by_key[c.key], c) for c in candidate if c.key in by_key]


def _youden(margins: Sequence[float], labels: Sequence[bool], threshold: float) -> float | None:
    positives = sum(bool(y) for y in labels)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return None
    flagged = [m < threshold for m in margins]
    tpr = sum(f and y for f, y in zip(flagged, labels, strict=True)) / positives
    fpr = sum(f and not y for f, y in zip(flagged, labels, strict=True)) / negatives
    return tpr - fpr


def calibrate(measured: Sequence[Pair], bins: int = CALIBRATION_BINS) -> Calibration:
    """Fit margin bins on the fit tasks, score them on the held-out tasks."""
    fit = [p for p in measured if not held_out(p.reference.task_id, p.reference.domain)]
    held = [p for p in measured if held_out(p.reference.task_id, p.reference.domain)]

    def margin(p: Pair) -> float:
        assert p.reference.name_margin is not None
        return p.reference.name_margin

    fit_margins = [margin(p) for p in fit]
    fitted = binned(fit_margins, [p.flip for p in fit], [p.candidate.error for p in fit],
                    quantile_edges(fit_margins, bins))
    held_margins = [margin(p) for p in held]
    flips = [p.flip for p in held]
    errors = [p.candidate.error for p in held]
    scored = score_bins(screen_bins(fitted), measured)
    constant = score_bins(constant_bins(measured), measured)
    found = best_threshold(fit_margins, [p.flip for p in fit])
    best_held = best_threshold(held_margins, flips)
    return Calibration(
        bins=fitted, fit_n=len(fit), held_n=len(held),
        held_flip_auroc=auroc([-m for m in held_margins], flips),
        held_error_auroc=auroc([-m for m in held_margins], errors),
        held_flip_brier=scored.flip_brier, held_error_brier=scored.error_brier,
        base_flip_brier=constant.flip_brier, base_error_brier=constant.error_brier,
        threshold=found[0] if found else None,
        threshold_held_j=_youden(held_margins, flips, found[0]) if found else None,
        best_held_threshold=best_held[0] if best_held else None,
    )


@dataclass(frozen=True)
class NameStats:
    reference_wrong: int  # decisions naming a tool that was not offered (unknown_tool)
    candidate_wrong: int
    amplification: float | None  # candidate unknown_tool rate over the reference's
    overlap: NameOverlap


def unknown_names(rows: Sequence[Row]) -> Counter[str]:
    return Counter(r.chosen_name or "" for r in rows if r.channel == "unknown_tool")


def name_stats(reference: Sequence[Row], candidate: Sequence[Row]) -> NameStats:
    ref, cand = unknown_names(reference), unknown_names(candidate)
    ref_rate = sum(ref.values()) / len(reference) if reference else math.nan
    cand_rate = sum(cand.values()) / len(candidate) if candidate else math.nan
    if math.isnan(ref_rate) or math.isnan(cand_rate) or (ref_rate == 0 and cand_rate == 0):
        ratio = None
    elif ref_rate == 0:
        ratio = math.inf
    else:
        ratio = cand_rate / ref_rate
    return NameStats(sum(ref.values()), sum(cand.values()), ratio, name_overlap(ref, cand))


def channel_rates(rows: Sequence[Row]) -> dict[str, Rate]:
    counts = Counter(r.channel for r in rows)
    return {channel: wilson(count, len(rows)) for channel, count in sorted(counts.items())}


def exact_match(rows: Sequence[Row]) -> Rate:
    return wilson(sum(r.correct for r in rows), len(rows))


@dataclass(frozen=True)
class HeldOutScore:
    """How well a calibration's bins predict the held-out decisions of a run."""

    n: int  # held-out pairs with a known reference name margin
    flip_brier: float | None
    error_brier: float | None
    flip_auroc: float | None  # of the calibration's predicted flip rate
    error_auroc: float | None


def screen_bins(bins: Sequence[Bin]) -> list[screen.Bin]:
    """Fitted bins as `reflexguard screen` reads them (open edges infinite; a bin nothing
    fell into predicts nothing)."""
    return [screen.Bin(-math.inf if b.lo is None else b.lo, math.inf if b.hi is None else b.hi,
                       b.n, b.flips / b.n if b.n else math.nan,
                       b.errors / b.n if b.n else math.nan) for b in bins]


def constant_bins(measured: Sequence[Pair]) -> list[screen.Bin]:
    """The baseline a calibration must beat: the fit half's rates, one for every margin."""
    fit = [p for p in measured if not held_out(p.reference.task_id, p.reference.domain)]
    return [screen.Bin(-math.inf, math.inf, len(fit),
                       sum(p.flip for p in fit) / len(fit) if fit else math.nan,
                       sum(p.candidate.error for p in fit) / len(fit) if fit else math.nan)]


def score_bins(bins: Sequence[screen.Bin], measured: Sequence[Pair]) -> HeldOutScore:
    """A calibration's bins (as `reflexguard screen` reads them) scored on the held-out
    half of `measured` (the split `calibrate` fits on the other half of): Brier of the
    predicted rates and the AUROC of the prediction itself."""
    held = [p for p in measured if held_out(p.reference.task_id, p.reference.domain)]
    known = [p for p in held if p.reference.name_margin is not None]
    found = [screen.bin_for(bins, p.reference.name_margin or 0.0) for p in known]
    flips = [p.flip for p in known]
    errors = [p.candidate.error for p in known]
    flip_predicted = [b.flip_rate if b else math.nan for b in found]
    error_predicted = [b.error_rate if b else math.nan for b in found]
    return HeldOutScore(
        n=len(known), flip_brier=brier(flip_predicted, flips),
        error_brier=brier(error_predicted, errors),
        flip_auroc=auroc(flip_predicted, flips), error_auroc=auroc(error_predicted, errors))
