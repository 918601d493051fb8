"""Budget spent per episode, paired spend differences and outcome counts, on hand-made records."""

from __future__ import annotations

import json
from pathlib import Path

from bench.records import Arm, Cell, EpisodeRecord, ProxyRecord, ToolCallRecord
from bench.stats import analysis
from reflexguard.core.attempts import Outcome
from reflexguard.ops.events import Event, OutcomeEvent

CELL = Cell(model="m", family="f", precision="Q4", reference=True, domain="mock")


def record(errors: int, task: str = "t", arm: Arm = "on", termination: str = "user_stop",
           outcomes: dict[str, int] | None = None) -> EpisodeRecord:
    calls = [ToolCallRecord(turn=i, name="x", error=True, channel="unknown_tool")
             for i in range(errors)] + [ToolCallRecord(turn=errors, name="y", error=False)]
    return EpisodeRecord(cell=CELL, arm=arm, task_id=task, trial=0, seed=1,
                         termination_reason=termination, reward=0.0, agent_turns=errors + 1,
                         calls=calls, proxy=ProxyRecord(outcomes=outcomes or {}))


def test_budget_spent_counts_error_messages_per_episode() -> None:
    records = [record(0, "a"), record(1, "b"), record(3, "c", termination="too_many_errors"),
               record(0, "d")]
    spent = analysis.budget_spent(records)
    assert (spent.n, spent.mean, spent.median) == (4, 1.0, 0.5)
    assert spent.distribution == {0: 2, 1: 1, 3: 1}
    assert spent.exhausted == 1
    assert 0.0 <= spent.low <= spent.mean <= spent.high <= 3.0
    assert spent.low < spent.high  # the interval is not a point when the counts vary


def test_budget_spent_of_nothing_is_empty_not_zero() -> None:
    spent = analysis.budget_spent([])
    assert spent.n == 0 and spent.distribution == {} and spent.mean != spent.mean  # NaN


def test_spend_difference_is_paired_by_task_and_trial() -> None:
    on = [record(3, "a"), record(2, "b"), record(5, "only-on")]
    budget = [record(1, "a", arm="on+budget"), record(2, "b", arm="on+budget")]
    effect = analysis.spend_difference(budget, on)
    assert effect is not None
    assert (effect.difference, effect.pairs) == (-1.0, 2)
    assert effect.low == -2.0 and effect.high == 0.0
    assert analysis.spend_difference(budget, []) is None


def test_outcome_counts_add_up_over_episodes() -> None:
    records = [record(0, outcomes={"exhausted": 1, "repeated_failure": 2}),
               record(0, outcomes={"repeated_failure": 1, "fixed_by_reask": 3})]
    assert analysis.outcome_counts(records) == {"exhausted": 1, "fixed_by_reask": 3,
                                                "repeated_failure": 3}


def test_proxy_record_keeps_every_outcome() -> None:
    from bench.tau2.episode import proxy_record

    def outcome(name: Outcome) -> Event:
        return OutcomeEvent(event="outcome", ts=1.0, outcome=name, request_id="r", session="s")

    proxy = proxy_record([outcome("exhausted"), outcome("fixed_by_reask"),
                          outcome("fixed_by_reask"), outcome("observed")])
    assert proxy.outcomes == {"exhausted": 1, "fixed_by_reask": 2, "observed": 1}
    assert (proxy.repairs_attempted, proxy.repairs_succeeded) == (3, 2)


def test_events_reader_skips_lines_it_does_not_know_and_counts_them(tmp_path: Path) -> None:
    from bench.tau2.runner import EventsReader

    path = tmp_path / "events" / "cell-on.jsonl"
    path.parent.mkdir()
    known = {"event": "outcome", "ts": 1.0, "outcome": "exhausted", "request_id": "r",
             "session": "a"}
    newer = {"event": "some_future_event", "ts": 2.0, "session": "a"}
    path.write_text(json.dumps(newer) + "\n" + json.dumps(known) + "\n")
    reader = EventsReader(path, tmp_path)
    assert reader("a") == [known]
    assert reader.skipped == 1
    assert reader.relative == "events/cell-on.jsonl"


def test_a_resumed_run_ignores_the_events_of_the_interrupted_episode(tmp_path: Path) -> None:
    from bench.tau2.runner import EventsReader

    path = tmp_path / "events.jsonl"

    def outcome(name: str) -> str:
        return json.dumps({"event": "outcome", "ts": 1.0, "outcome": name,
                           "request_id": "r", "session": "same"}) + "\n"

    path.write_text(outcome("exhausted"))  # the abandoned attempt of session "same"
    reader = EventsReader(path, tmp_path, skip_existing=True)
    with path.open("a") as handle:
        handle.write(outcome("fixed_by_reask"))  # its rerun
    assert [e["outcome"] for e in reader("same")] == ["fixed_by_reask"]  # type: ignore[typeddict-item]


def test_low_budget_turns_are_those_with_two_or_fewer_errors_left() -> None:
    calls = [ToolCallRecord(turn=0, name="x", error=True, channel="unknown_tool"),
             ToolCallRecord(turn=2, name="x", error=True, channel="unknown_tool"),
             ToolCallRecord(turn=3, name="y", error=False)]
    episode = EpisodeRecord(cell=CELL, arm="on+budget", task_id="t", trial=0, seed=1,
                            termination_reason="user_stop", reward=0.0, agent_turns=4,
                            calls=calls)
    # K=3: turn 0 has 3 left; turns 1-2 have 2 left; turn 3 has 1 left.
    assert analysis.low_budget_turns(episode, 3) == 3
    assert analysis.low_budget_turns(episode, 10) == 0
    assert analysis.low_budget_turns(episode, 2) == 4
