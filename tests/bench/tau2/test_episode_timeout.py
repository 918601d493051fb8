"""The per-episode wall-clock limit: its own termination reason, a failure, in the report.

Through tau2's real orchestrator with the simulated agent (no model runs).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bench.compare import parser
from bench.report.writer import build_report
from bench.tau2.cells import simulated_cells
from bench.tau2.episode import EPISODE_TIMEOUT, EpisodeTimeout, enforce_deadline
from bench.tau2.runner import RunOptions, run

pytestmark = pytest.mark.tau2


def test_an_episode_past_its_limit_is_an_episode_timeout_and_a_failure(tmp_path: Path) -> None:
    records = run(simulated_cells([]), RunOptions(
        out=tmp_path, arms=["off"], domains=["mock"], task_ids=["create_task_1"],
        episode_timeout=1e-9))
    assert records
    for record in records:
        assert record.termination_reason == EPISODE_TIMEOUT
        assert record.reward == 0.0 and not record.success
        assert record.infrastructure_error is None  # not a crash: its own reason
        assert record.tau2["note"].startswith("episode_timeout: EpisodeTimeout")
    summary = build_report(tmp_path)
    assert all(reasons == {EPISODE_TIMEOUT: 1} for arms in summary["termination"].values()
               for reasons in arms.values())
    report = (tmp_path / "report.md").read_text()
    assert "| cell | repair | episode_timeout |" in report


def test_without_a_limit_the_same_episode_succeeds(tmp_path: Path) -> None:
    records = run(simulated_cells([]), RunOptions(
        out=tmp_path, arms=["off"], domains=["mock"], task_ids=["create_task_1"],
        episode_timeout=None))
    assert {r.termination_reason for r in records} != {EPISODE_TIMEOUT}
    assert all(r.success for r in records)


class Actor:
    def __init__(self) -> None:
        self.llm_args: dict[str, Any] = {"timeout": 900}
        self.seen: list[float] = []

    def generate_next_message(self, message: Any, state: Any) -> tuple[str, Any]:
        self.seen.append(self.llm_args["timeout"])
        return "reply", state


def test_each_llm_call_gets_the_time_left_and_none_starts_after_the_deadline() -> None:
    actor = Actor()
    enforce_deadline(actor, time.monotonic() + 30, 30)
    actor.generate_next_message("hi", None)
    assert 28 < actor.seen[0] <= 30  # the time left, not litellm's 900 s
    late = Actor()
    enforce_deadline(late, time.monotonic() - 1, 30)
    with pytest.raises(EpisodeTimeout):
        late.generate_next_message("hi", None)
    assert late.seen == []


def test_compare_flags_and_defaults() -> None:
    args = parser().parse_args([])
    assert (args.episode_timeout, args.max_tokens) == (600.0, 512)
    args = parser().parse_args(["--episode-timeout", "0", "--max-tokens", "256"])
    assert (args.episode_timeout, args.max_tokens) == (0.0, 256)
