"""The study's statistics on synthetic decisions whose answers are known."""

from __future__ import annotations

import math

import pytest

from bench.stats import margins as stats


def row(variant: str, task: str, step: int, chosen: str | None, gold: str = "get",
        channel: str = "ok", margin: float | None = 1.0) -> stats.Row:
    return stats.Row(variant=variant, domain="mock", task_id=task, step=step, gold_name=gold,
                     chosen_name=chosen, channel=channel, name_margin=margin,
                     call_margin=margin)


def test_auroc_of_a_perfect_predictor_is_one_and_of_its_reverse_zero() -> None:
    scores = [0.1, 0.2, 0.3, 0.8, 0.9]
    labels = [False, False, False, True, True]
    assert stats.auroc(scores, labels) == 1.0
    assert stats.auroc([-s for s in scores], labels) == 0.0


def test_auroc_counts_ties_as_half_and_needs_both_classes() -> None:
    assert stats.auroc([1.0, 1.0, 1.0, 1.0], [True, False, True, False]) == 0.5
    assert stats.auroc([0.0, 1.0, 2.0], [True, False, True]) == 0.5  # Mann-Whitney by hand
    assert stats.auroc([0.1, 0.2], [True, True]) is None


def test_bootstrap_interval_brackets_a_clear_effect_and_counts_clusters() -> None:
    scores = [float(i) for i in range(40)]
    labels = [i >= 30 for i in range(40)]
    groups = [f"t{i // 4}" for i in range(40)]
    found = stats.bootstrap_auroc(scores, labels, groups, resamples=200)
    assert found.value == 1.0
    assert found.low is not None and found.low > 0.9
    assert (found.n, found.positives, found.clusters) == (40, 10, 10)


def test_bins_are_closed_below_and_open_above_with_infinite_ends() -> None:
    bins = stats.binned([-5.0, 0.0, 0.5, 1.0, 9.0], [True, True, False, False, False],
                        [True, False, False, False, True], edges=[0.0, 1.0])
    assert [(b.lo, b.hi, b.n, b.flips, b.errors) for b in bins] == [
        (None, 0.0, 1, 1, 1), (0.0, 1.0, 2, 1, 0), (1.0, None, 2, 0, 1)]


def test_quantile_edges_split_into_equal_groups() -> None:
    margins = [float(i) for i in range(10)]
    edges = stats.quantile_edges(margins, 5)
    sizes = [b.n for b in stats.binned(margins, [False] * 10, [False] * 10, edges)]
    assert sizes == [2, 2, 2, 2, 2]


def test_brier_is_zero_for_perfect_and_one_for_certainly_wrong_forecasts() -> None:
    assert stats.brier([1.0, 0.0], [True, False]) == 0.0
    assert stats.brier([0.0, 1.0], [True, False]) == 1.0
    assert stats.brier([math.nan], [True]) is None


def test_best_threshold_separates_thin_from_wide_margins() -> None:
    found = stats.best_threshold([0.1, 0.2, 3.0, 4.0], [True, True, False, False])
    assert found == (3.0, 1.0)  # flag margin < 3.0: every flip, no stable decision


def test_flips_errors_and_names_against_the_reference() -> None:
    reference = [row("Q4", "a", 0, "get", margin=0.1), row("Q4", "a", 1, "get", margin=5.0),
                 row("Q4", "b", 0, "ghost", channel="unknown_tool", margin=0.2)]
    candidate = [row("Q2", "a", 0, "list", margin=0.1), row("Q2", "a", 1, "get"),
                 row("Q2", "b", 0, "ghost", channel="unknown_tool"),
                 row("Q2", "z", 0, "get")]  # no reference decision: not paired
    joined = stats.pairs(reference, candidate)
    assert [p.flip for p in joined] == [True, False, False]
    assert [p.candidate.error for p in joined] == [True, False, True]
    names = stats.name_stats(reference, candidate[:3])
    assert (names.reference_wrong, names.candidate_wrong, names.amplification) == (1, 1, 1.0)
    assert names.overlap.lower_new == 0
    scores = [-(p.reference.name_margin or 0.0) for p in joined]
    assert stats.auroc(scores, [p.flip for p in joined]) == 1.0


def test_a_reply_without_a_call_is_an_error_and_not_the_gold_name() -> None:
    text = row("Q2", "a", 0, None, channel="no_call", margin=None)
    assert text.error and not text.correct
    assert stats.exact_match([text, row("Q2", "a", 1, "get")]).successes == 1


def test_held_out_split_is_fixed_by_task_and_roughly_half() -> None:
    tasks = [f"task_{i}" for i in range(200)]
    held = [stats.held_out(t, "retail") for t in tasks]
    assert held == [stats.held_out(t, "retail") for t in tasks]
    assert 70 < sum(held) < 130


def test_calibration_fits_on_some_tasks_and_scores_on_the_others() -> None:
    reference, candidate = [], []
    for t in range(40):
        for step in range(3):
            margin = 0.05 * step if t % 2 else 4.0 + step
            reference.append(row("Q4", f"t{t}", step, "get", margin=margin))
            flipped = margin < 1.0
            candidate.append(row("Q2", f"t{t}", step, "list" if flipped else "get"))
    found = stats.calibrate(stats.pairs(reference, candidate))
    assert found.fit_n + found.held_n == 120 and found.fit_n and found.held_n
    assert found.held_flip_auroc == 1.0
    assert found.held_flip_brier == pytest.approx(0.0)
    assert found.base_flip_brier is not None and found.base_flip_brier > 0.2
    assert found.threshold is not None and 0.1 < found.threshold <= 4.0
    assert found.threshold_held_j == 1.0
