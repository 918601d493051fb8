"""The BFCL bench's statistics. Pure functions over CaseRecords: no files, no sockets.

Accuracy is BFCL's checker's, with Wilson intervals (bench.stats.analysis). Arms and
precisions are compared on the same cases, paired: exact McNemar tests on the discordant
cases, Holm-corrected across a family. Channel rates are reflexguard's reading of each
request's first answer; their amplification from the reference precision is a ratio of
rates with a percentile bootstrap over cases, resampled jointly in both cells.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from bench.stats.analysis import (
    ALPHA,
    NameOverlap,
    PairedEffect,
    Rate,
    bootstrap_mean,
    name_overlap,
    wilson,
)
from bench.stats.bfcl_records import CaseRecord
from reflexguard.core.channels import ERROR_CHANNELS

CHANNELS: tuple[str, ...] = tuple(str(c) for c in ERROR_CHANNELS)
UNTOUCHED = frozenset({"clean", "observed"})  # outcomes where the answer went out as it came


def accuracy(records: Sequence[CaseRecord]) -> Rate:
    return wilson(sum(r.correct for r in records), len(records))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar: the discordant pairs against Binomial(b + c, 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2 * stats.binom.cdf(min(b, c), n, 0.5)))


def mcnemar_greater(worse: int, better: int) -> float:
    """One-sided exact McNemar: are cases lost (`worse`) more than won (`better`)?"""
    n = worse + better
    if n == 0:
        return 1.0
    return float(stats.binom.sf(worse - 1, n, 0.5))


@dataclass(frozen=True)
class Paired:
    """Treated against baseline on the cases both ran."""

    pairs: int
    baseline_correct: int
    treated_correct: int
    fixed: tuple[str, ...]  # wrong in the baseline, right when treated
    broken: tuple[str, ...]  # right in the baseline, wrong when treated
    p_value: float  # exact McNemar, two-sided

    @property
    def difference(self) -> float:
        return (self.treated_correct - self.baseline_correct) / self.pairs if self.pairs \
            else float("nan")


def _order(case_id: str) -> tuple[str, int]:
    head, _, tail = case_id.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (case_id, -1)


def paired(baseline: Iterable[CaseRecord], treated: Iterable[CaseRecord]) -> Paired:
    base = {r.case_id: r.correct for r in baseline}
    both = {r.case_id: (base[r.case_id], r.correct) for r in treated if r.case_id in base}
    fixed = tuple(sorted((i for i, (b, t) in both.items() if t and not b), key=_order))
    broken = tuple(sorted((i for i, (b, t) in both.items() if b and not t), key=_order))
    return Paired(len(both), sum(b for b, _ in both.values()), sum(t for _, t in both.values()),
                  fixed, broken, mcnemar_exact(len(fixed), len(broken)))


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm–Bonferroni adjusted p-values (monotone step-down)."""
    ordered = sorted(p_values.items(), key=lambda item: (item[1], item[0]))
    adjusted: dict[str, float] = {}
    running = 0.0
    for rank, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p))
        adjusted[key] = running
    return adjusted


@dataclass(frozen=True)
class ChannelRates:
    entries: int  # first-answer verdicts: one per call, or one for a reply without a call
    requests: int
    cases: int
    counts: dict[str, int]
    cases_with: dict[str, int]

    def per_entry(self, channel: str) -> float:
        return self.counts.get(channel, 0) / self.entries if self.entries else float("nan")

    def per_case(self, channel: str) -> float:
        return self.cases_with.get(channel, 0) / self.cases if self.cases else float("nan")


def channel_rates(records: Sequence[CaseRecord]) -> ChannelRates:
    counts: Counter[str] = Counter()
    cases_with: Counter[str] = Counter()
    for record in records:
        counts.update(record.first_attempt_channels)
        cases_with.update({c for c, n in record.first_attempt_channels.items() if n})
    return ChannelRates(sum(counts.values()), sum(r.requests for r in records), len(records),
                        dict(counts), dict(cases_with))


@dataclass(frozen=True)
class Ratio:
    value: float | None  # None: the channel never occurred in either cell
    low: float | None
    high: float | None
    reference_count: int
    lower_count: int


def _ratio(low_hits: float, low_entries: float, ref_hits: float, ref_entries: float) -> float:
    if low_entries == 0 or ref_entries == 0:
        return math.nan
    if ref_hits == 0:
        return math.inf if low_hits else math.nan
    return (low_hits / low_entries) / (ref_hits / ref_entries)


def amplification(reference: Sequence[CaseRecord], lower: Sequence[CaseRecord], channel: str,
                  resamples: int = 2000, seed: int = 0) -> Ratio:
    """The lower cell's per-entry rate of `channel` over the reference's, on shared cases,
    with a percentile bootstrap 95% CI over those cases."""
    ref = {r.case_id: r for r in reference}
    shared = sorted((r.case_id for r in lower if r.case_id in ref), key=_order)
    low = {r.case_id: r for r in lower}
    table = np.array([[low[i].first_attempt_channels.get(channel, 0),
                       sum(low[i].first_attempt_channels.values()),
                       ref[i].first_attempt_channels.get(channel, 0),
                       sum(ref[i].first_attempt_channels.values())] for i in shared],
                     dtype=float).reshape(-1, 4)
    totals = table.sum(axis=0)
    point = _ratio(*totals)
    ref_count, low_count = int(totals[2]), int(totals[0])
    if math.isnan(point):
        return Ratio(None, None, None, ref_count, low_count)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(shared), size=(resamples, len(shared)))
    sums = table[picks].sum(axis=1)
    ratios = np.array([_ratio(*row) for row in sums])
    defined = ratios[~np.isnan(ratios)]
    # Order statistics, not interpolation: a resample without a reference hit is an
    # infinite ratio, and interpolating towards it would give NaN.
    low_q, high_q = (np.quantile(defined, [0.025, 0.975], method="inverted_cdf")
                     if len(defined) else (math.nan, math.nan))
    return Ratio(float(point), float(low_q), float(high_q), ref_count, low_count)


def wrong_names(records: Iterable[CaseRecord]) -> Counter[str]:
    names: Counter[str] = Counter()
    for record in records:
        names.update(record.unknown_tool_names)
    return names


def names_overlap(reference: Sequence[CaseRecord], lower: Sequence[CaseRecord]) -> NameOverlap:
    """Spearman's ρ of the wrong names' counts between precisions, and the share new."""
    return name_overlap(wrong_names(reference), wrong_names(lower))


@dataclass(frozen=True)
class Damage:
    cell: str
    category: str
    comparison: Paired  # reference (baseline) against the lower precision (treated)
    p_value: float  # one-sided: the lower precision loses more cases than it wins
    adjusted: float  # Holm over every lower cell × category

    @property
    def damaged(self) -> bool:
        return self.adjusted < ALPHA


def damage_tests(pairs: Mapping[tuple[str, str], tuple[Sequence[CaseRecord],
                                                        Sequence[CaseRecord]]]) -> list[Damage]:
    """`pairs`: (lower cell, category) → (reference's off-arm cases, the lower's)."""
    compared = {key: paired(ref, low) for key, (ref, low) in pairs.items()}
    raw = {f"{cell}|{cat}": mcnemar_greater(len(p.broken), len(p.fixed))
           for (cell, cat), p in compared.items()}
    adjusted = holm(raw)
    return [Damage(cell, cat, p, raw[f"{cell}|{cat}"], adjusted[f"{cell}|{cat}"])
            for (cell, cat), p in sorted(compared.items())]


def per_case_mean(values: Sequence[float], seed: int = 0) -> PairedEffect | None:
    return bootstrap_mean(list(values), seed=seed)


def token_cost(off: Sequence[CaseRecord], on: Sequence[CaseRecord],
               seed: int = 0) -> dict[str, PairedEffect | None]:
    """Per case, on minus off, paired: tokens the client was billed (reflexguard sums every
    attempt into `usage`) and upstream requests."""
    base = {r.case_id: r for r in off}
    shared = [(base[r.case_id], r) for r in on if r.case_id in base]
    return {
        "input_tokens": bootstrap_mean([float(t.input_tokens - b.input_tokens)
                                        for b, t in shared], seed=seed),
        "output_tokens": bootstrap_mean([float(t.output_tokens - b.output_tokens)
                                         for b, t in shared], seed=seed),
        "upstream_calls": bootstrap_mean([float(t.requests + t.extra_upstream_calls
                                                - b.requests - b.extra_upstream_calls)
                                          for b, t in shared], seed=seed),
        # Only where both arms asked the model: a shared first answer takes no model time.
        "latency_s": bootstrap_mean([t.latency_s - b.latency_s for b, t in shared
                                     if not (t.first_answers_shared
                                             or b.first_answers_shared)], seed=seed),
    }


def untouched_agreement(off: Sequence[CaseRecord], on: Sequence[CaseRecord]) -> Rate:
    """Among cases where repair changed nothing (every on-arm request clean or observed,
    no extra call), the share whose saved answers are identical in both arms: a floor on
    how deterministic the first answers are (greedy decoding, one server per cell)."""
    base = {r.case_id: r for r in off if not r.first_answers_shared}
    same = n = 0
    for record in on:
        if record.first_answers_shared:
            continue  # answered from the off arm's request: agreement by construction
        if record.case_id not in base or record.extra_upstream_calls or (
                set(record.outcomes) - UNTOUCHED):
            continue
        n += 1
        same += record.result == base[record.case_id].result
    return wilson(same, n)
