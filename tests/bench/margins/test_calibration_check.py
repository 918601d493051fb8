"""Scoring calibrations on a run's held-out decisions: the pure maths and the command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.margins.calibration_check import main
from bench.stats import margins as stats
from reflexguard.core.screen import Bin

INF = math.inf


def _pair(task: str, margin: float, flip: bool) -> stats.Pair:
    reference = stats.Row("Q4_K_M", "bfcl_multiple", task, 0, "f", "f", "ok", margin, 1.0)
    candidate = stats.Row("Q2_K", "bfcl_multiple", task, 0, "f", "g" if flip else "f",
                          "ok", 1.0, 1.0)
    return stats.Pair(reference, candidate)


def _held(count: int) -> list[str]:
    return [t for t in (f"multiple_{i}" for i in range(400))
            if stats.held_out(t, "bfcl_multiple")][:count]


def test_bins_that_know_thin_margins_flip_beat_a_constant_rate() -> None:
    tasks = _held(20)
    measured = [_pair(t, 0.2 if i % 2 else 5.0, flip=bool(i % 2)) for i, t in enumerate(tasks)]
    knowing = stats.score_bins([Bin(-INF, 1.0, 10, 1.0, 1.0), Bin(1.0, INF, 10, 0.0, 1.0)],
                               measured)
    constant = stats.score_bins([Bin(-INF, INF, 20, 0.5, 0.5)], measured)
    assert knowing.n == constant.n == 20
    assert knowing.flip_brier == 0.0 and constant.flip_brier == 0.25
    assert knowing.flip_auroc == 1.0 and constant.flip_auroc == 0.5


def test_only_the_held_out_half_is_scored() -> None:
    fit = [t for t in (f"multiple_{i}" for i in range(50))
           if not stats.held_out(t, "bfcl_multiple")]
    measured = [_pair(t, 0.2, flip=True) for t in fit]
    assert stats.score_bins([Bin(-INF, INF, 1, 0.0, 0.0)], measured).n == 0


def test_the_command_refuses_a_missing_run_or_file_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), str(tmp_path / "c.json")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "decisions.jsonl").write_text("")
    (tmp_path / "c.json").write_text(json.dumps({"bins": "nope"}))
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), str(tmp_path / "c.json")])
    assert exit_info.value.code == 2 and "not a calibration file" in capsys.readouterr().err
