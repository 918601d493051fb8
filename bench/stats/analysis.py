"""The bench's statistics. Pure functions over EpisodeRecords: no files, no sockets.

Success at a budget K' <= K is recomputed exactly from one run at K (tau2's
`max_errors`): an episode succeeds at K' when it earned reward 1 and produced fewer than
K' error tool messages. Infrastructure errors stay in the denominator as failures.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from bench.records import ENV_CHANNELS, EpisodeRecord

ALPHA = 0.05
RECOVERY_WINDOW = 2  # agent turns after a failed call in which a success counts


@dataclass(frozen=True)
class Rate:
    successes: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.successes / self.n if self.n else float("nan")


def rounded(value: float | None) -> float | str | None:
    """A figure fit for summary.json: four decimals; infinity as "inf" (JSON has none);
    None and NaN (a rate of nothing) as None."""
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        return "inf"
    return round(value, 4)


def p_rounded(value: float | None) -> float | None:
    """A p-value kept to three significant figures: rounding to decimal places, as the
    rates are, would print a strong effect's p (1e-9) as 0."""
    if value is None or math.isnan(value):
        return None
    return float(f"{value:.3g}")


def wilson(successes: int, n: int, z: float = 1.96) -> Rate:
    """The Wilson score interval: sound at 0 and n, where the normal one is not."""
    if n == 0:
        return Rate(0, 0, float("nan"), float("nan"))
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return Rate(successes, n, max(0.0, centre - half), min(1.0, centre + half))


def succeeds_at(record: EpisodeRecord, budget: int) -> bool:
    return record.success and record.error_count < budget


def success_curve(records: Sequence[EpisodeRecord], max_errors: int = 10) -> dict[int, Rate]:
    """Success with its Wilson interval for every budget K = 1..max_errors."""
    scored = [r for r in records if not r.unscored]
    return {k: wilson(sum(succeeds_at(r, k) for r in scored), len(scored))
            for k in range(1, max_errors + 1)}


def group(records: Iterable[EpisodeRecord]) -> dict[tuple[str, str], list[EpisodeRecord]]:
    groups: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        groups[record.cell.key, record.arm].append(record)
    return dict(groups)


@dataclass(frozen=True)
class ChannelRates:
    calls: int  # agent tool calls (plus calls lost to malformed JSON)
    episodes: int
    counts: dict[str, int]
    episodes_with: dict[str, int]
    mean_turns: float

    def per_call(self, channel: str) -> float:
        return self.counts.get(channel, 0) / self.calls if self.calls else float("nan")

    def per_episode(self, channel: str) -> float:
        return self.episodes_with.get(channel, 0) / self.episodes if self.episodes else 0.0


def env_channel_rates(records: Sequence[EpisodeRecord]) -> ChannelRates:
    """Errors that reached tau2's environment (and malformed JSON, which never does)."""
    counts: Counter[str] = Counter()
    episodes_with: Counter[str] = Counter()
    calls = 0
    for record in records:
        seen = Counter(c.channel for c in record.calls if c.error and c.channel)
        malformed = _malformed_crashes(record)
        if malformed:
            seen["malformed_args"] += malformed
        calls += len(record.calls) + malformed
        counts.update(seen)
        episodes_with.update(set(seen))
    turns = [r.agent_turns for r in records]
    return ChannelRates(calls, len(records), dict(counts), dict(episodes_with),
                        float(np.mean(turns)) if turns else 0.0)


def _malformed_crashes(record: EpisodeRecord) -> int:
    """tau2 cannot parse malformed arguments: the episode dies with a JSON error."""
    error = record.infrastructure_error or ""
    return 1 if "JSONDecodeError" in error or "Expecting" in error else 0


def model_channel_rates(records: Sequence[EpisodeRecord]) -> ChannelRates:
    """What the model produced, as reflexguard counted it on each request's first answer."""
    counts: Counter[str] = Counter()
    episodes_with: Counter[str] = Counter()
    for record in records:
        first = Counter(record.proxy.first_attempt_channels)
        counts.update(first)
        episodes_with.update({k for k, v in first.items() if v and k != "ok"})
    total = sum(counts.values())
    turns = [r.agent_turns for r in records]
    return ChannelRates(total, len(records), dict(counts), dict(episodes_with),
                        float(np.mean(turns)) if turns else 0.0)


def recovery(records: Sequence[EpisodeRecord]) -> Rate:
    """Failed calls followed by a successful call within the next two agent turns."""
    failed = recovered = 0
    for record in records:
        for call in record.calls:
            if not call.error:
                continue
            failed += 1
            if any(not later.error and call.turn < later.turn <= call.turn + RECOVERY_WINDOW
                   for later in record.calls):
                recovered += 1
    return wilson(recovered, failed)


def amplification(reference: ChannelRates, lower: ChannelRates,
                  channels: Sequence[str] = ENV_CHANNELS) -> dict[str, float | None]:
    """Lower-precision rate over reference rate, per channel (None when undefined)."""
    ratios: dict[str, float | None] = {}
    for channel in channels:
        ref, low = reference.per_call(channel), lower.per_call(channel)
        if math.isnan(ref) or math.isnan(low) or (ref == 0 and low == 0):
            ratios[channel] = None
        elif ref == 0:
            ratios[channel] = math.inf
        else:
            ratios[channel] = low / ref
    return ratios


@dataclass(frozen=True)
class NameOverlap:
    spearman: float | None
    p_value: float | None
    names: int
    lower_total: int
    lower_new: int  # lower-precision hallucinations whose name the reference never produced

    @property
    def share_new(self) -> float | None:
        return self.lower_new / self.lower_total if self.lower_total else None


def hallucinated_names(records: Sequence[EpisodeRecord]) -> Counter[str]:
    names: Counter[str] = Counter()
    for record in records:
        names.update(c.name for c in record.calls if c.channel == "unknown_tool")
    return names


def name_overlap(reference: Counter[str], lower: Counter[str]) -> NameOverlap:
    names = sorted(set(reference) | set(lower))
    new = sum(count for name, count in lower.items() if name not in reference)
    total = sum(lower.values())
    if len(names) < 3:
        return NameOverlap(None, None, len(names), total, new)
    rho, p = stats.spearmanr([reference[n] for n in names], [lower[n] for n in names])
    if math.isnan(rho):
        return NameOverlap(None, None, len(names), total, new)
    return NameOverlap(float(rho), float(p), len(names), total, new)


def fisher_greater(errors_low: int, calls_low: int, errors_ref: int, calls_ref: int) -> float:
    """One-sided Fisher's exact test: is the lower precision's error rate higher?"""
    table = [[errors_low, calls_low - errors_low], [errors_ref, calls_ref - errors_ref]]
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm–Bonferroni adjusted p-values (monotone step-down)."""
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    adjusted: dict[str, float] = {}
    running = 0.0
    m = len(ordered)
    for rank, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[key] = running
    return adjusted


@dataclass(frozen=True)
class ChannelTest:
    cell: str
    channel: str
    ratio: float | None
    p_value: float
    adjusted: float

    @property
    def significant(self) -> bool:
        return self.adjusted < ALPHA and (self.ratio is None or self.ratio > 1)


def damage_tests(pairs: dict[str, tuple[ChannelRates, ChannelRates]],
                 channels: Sequence[str] = ENV_CHANNELS) -> list[ChannelTest]:
    """Fisher tests for every lower cell and channel, Holm-corrected over all of them.

    `pairs` maps a lower-precision cell to (its reference cell's rates, its own rates),
    both from the observe arm, where nothing was repaired.
    """
    raw: dict[str, float] = {}
    ratios: dict[str, float | None] = {}
    for cell, (ref, low) in pairs.items():
        amp = amplification(ref, low, channels)
        for channel in channels:
            key = f"{cell}|{channel}"
            raw[key] = fisher_greater(low.counts.get(channel, 0), low.calls,
                                      ref.counts.get(channel, 0), ref.calls)
            ratios[key] = amp[channel]
    adjusted = holm(raw)
    tests = []
    for key, p in raw.items():
        cell, channel = key.split("|")
        tests.append(ChannelTest(cell, channel, ratios[key], p, adjusted[key]))
    return tests


@dataclass(frozen=True)
class PairedEffect:
    difference: float
    low: float
    high: float
    pairs: int


def bootstrap_mean(values_in: Sequence[float], resamples: int = 2000,
                   seed: int = 0) -> PairedEffect | None:
    """The mean with a percentile bootstrap 95% CI (of paired differences, or of counts)."""
    if not values_in:
        return None
    values = np.asarray(values_in, dtype=float)
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(resamples, len(values)), replace=True).mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return PairedEffect(float(values.mean()), float(low), float(high), len(values))


def repair_effect(on: Sequence[EpisodeRecord], off: Sequence[EpisodeRecord], budget: int,
                  resamples: int = 2000, seed: int = 0) -> PairedEffect | None:
    """Success(on) - success(off) at one budget, paired by task and trial, bootstrap CI.

    Any two arms compare this way: `on` is the treated arm, `off` the baseline.
    """
    off_by_key = {(r.task_id, r.trial): r for r in off if not r.unscored}
    diffs = [float(succeeds_at(r, budget)) - float(succeeds_at(off_by_key[r.task_id, r.trial],
                                                                 budget))
             for r in on if not r.unscored and (r.task_id, r.trial) in off_by_key]
    return bootstrap_mean(diffs, resamples, seed)


@dataclass(frozen=True)
class BudgetSpent:
    """Errors that reached tau2 per episode: what each episode spent of its budget K."""

    n: int
    mean: float
    low: float  # bootstrap 95% CI of the mean
    high: float
    median: float
    distribution: dict[int, int]  # errors spent -> episodes
    exhausted: int  # episodes ended by tau2 for spending all K (too_many_errors)


EXHAUSTED = "too_many_errors"  # tau2's TerminationReason.TOO_MANY_ERRORS


def budget_spent(records: Sequence[EpisodeRecord], budget: int | None = None,
                 resamples: int = 2000, seed: int = 0) -> BudgetSpent:
    """Every episode counts, unscored ones too: spending is a process measure, not a score.

    With `budget` K' below the run's K, what the same episodes would have spent at K'
    (exact, like success at K'): tau2 stops an episode at its K'-th error.
    """
    spent = [r.error_count if budget is None else min(r.error_count, budget) for r in records]
    mean = bootstrap_mean([float(e) for e in spent], resamples, seed)
    if mean is None:
        return BudgetSpent(0, float("nan"), float("nan"), float("nan"), float("nan"), {}, 0)
    exhausted = sum(r.termination_reason == EXHAUSTED if budget is None
                    else r.error_count >= budget for r in records)
    return BudgetSpent(len(spent), mean.difference, mean.low, mean.high,
                       float(np.median(spent)), dict(sorted(Counter(spent).items())), exhausted)


LOW_LEFT = 2  # reflexguard.core.budget.LOW: where the budget-aware ladder escalates


def low_budget_turns(record: EpisodeRecord, budget: int, low: int = LOW_LEFT) -> int:
    """Agent turns taken with `low` or fewer errors left of `budget`: the only turns where
    knowing K changes reflexguard's policy (docs/repair.md)."""
    return sum(1 for turn in range(record.agent_turns)
               if budget - sum(1 for c in record.calls if c.error and c.turn < turn) <= low)


def spend_difference(treated: Sequence[EpisodeRecord], baseline: Sequence[EpisodeRecord],
                     resamples: int = 2000, seed: int = 0) -> PairedEffect | None:
    """Errors spent (treated - baseline), paired by task and trial, bootstrap CI."""
    base = {(r.task_id, r.trial): r.error_count for r in baseline}
    diffs = [float(r.error_count - base[r.task_id, r.trial]) for r in treated
             if (r.task_id, r.trial) in base]
    return bootstrap_mean(diffs, resamples, seed)


def outcome_counts(records: Sequence[EpisodeRecord]) -> dict[str, int]:
    """reflexguard's outcomes over the episodes' requests (e.g. `repeated_failure`)."""
    counts: Counter[str] = Counter()
    for record in records:
        counts.update(record.proxy.outcomes)
    return dict(sorted(counts.items()))
