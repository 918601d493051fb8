"""Telemetry bounds: label sets, session memory, and the per-event flush of the JSONL file."""

from __future__ import annotations

import json
from pathlib import Path

from reflexguard.core.attempts import Attempt
from reflexguard.core.channels import Channel
from reflexguard.core.model import CallVerdict, Reply, Verdict
from reflexguard.ops.telemetry import MODEL_LABELS, Telemetry


def attempt(channel: Channel) -> Attempt:
    verdict = Verdict(calls=(CallVerdict(channel=channel, index=0, name="t"),))
    return Attempt(1, "initial", {}, (Reply(),), (verdict,), 0.01)


def test_model_labels_are_bounded(tmp_path: Path) -> None:
    telemetry = Telemetry(tmp_path / "events.jsonl")
    for index in range(MODEL_LABELS + 10):
        telemetry.attempt(attempt(Channel.OK), "r", None, f"model-{index}", "h", False)
    text = telemetry.metrics_text().decode()
    series = [line for line in text.splitlines()
              if line.startswith("reflexguard_tool_calls_total{")]
    assert len(series) == MODEL_LABELS + 1
    assert 'model="other"} 10.0' in text


def test_events_are_flushed_one_line_per_attempt(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    telemetry = Telemetry(path)
    telemetry.attempt(attempt(Channel.UNKNOWN_TOOL), "rg-1", "s", "m", "hash", False)
    lines = path.read_text().splitlines()  # readable before close: flushed per event
    event = json.loads(lines[0])
    assert event["calls"] == [{"channel": "unknown_tool", "name": "t", "detail": ""}]
    assert (event["request_id"], event["session"], event["toolset"]) == ("rg-1", "s", "hash")
    telemetry.close()


def test_attempt_and_outcome_events_carry_the_dialect(tmp_path: Path) -> None:
    from reflexguard.ops.events import read_event

    path = tmp_path / "events.jsonl"
    telemetry = Telemetry(path)
    telemetry.attempt(attempt(Channel.UNKNOWN_TOOL), "rg-1", "s", "m", "hash", True, "messages")
    telemetry.outcome("fixed_by_reask", [], "rg-1", "s", "messages")
    telemetry.close()
    records = [read_event(line) for line in path.read_text().splitlines()]
    assert [(r["event"], r.get("dialect")) for r in records] == [
        ("attempt", "messages"), ("outcome", "messages")]
    # A file written before events carried the dialect still reads.
    old = {k: v for k, v in json.loads(path.read_text().splitlines()[0]).items()
           if k != "dialect"}
    assert "dialect" not in read_event(json.dumps(old))

