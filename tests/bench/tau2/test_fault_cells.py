"""`bench.compare --inject-faults`: an INJECTED-faults cell beside the natural one, each
behind its own reflexguard, in front of a SIMULATED model (a fake upstream that always
makes the gold call): the damage is injected, the repair is the real ladder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.compare import parser
from bench.records import Arm
from bench.report.writer import build_report
from bench.tau2.cells import DEFAULT, CellsConfig, Endpoint, ModelEntry, Precision
from bench.tau2.episode import session_key
from bench.tau2.fault_cells import FaultCellsError, served_together, with_fault_cells
from bench.tau2.runner import RunOptions, run
from reflexguard.core.limits import LABEL_LIMIT, safe_label
from tests.fakes.fake_upstream import FakeUpstream, Scripted, text_completion, tool_call_completion
from tests.fakes.threaded_upstream import threaded_fake

pytestmark = pytest.mark.tau2
ARMS: list[Arm] = ["off", "on"]


def test_a_variant_per_spec_beside_the_reference_and_served_by_its_server() -> None:
    config = with_fault_cells(DEFAULT, ["unknown_tool=0", "unknown_tool=0.2",
                                        "unknown_tool=0.2", "malformed_args=0.1,seed=3"])
    labels = [p.label.split()[0] for p in config.models[0].precisions]
    assert labels == ["Q4_K_M", "Q2_K", "Q4_K_M+inject:unknown_tool=0.2,seed=0,reasks=off",
                      "Q4_K_M+inject:malformed_args=0.1,seed=3,reasks=off"]
    assert all("INJECTED" in p.label for p in config.models[0].precisions[2:])
    assert sum(p.reference for p in config.models[0].precisions) == 1
    groups = served_together(config.models[0].precisions)
    assert [[p.label.split()[0] for p in members] for _, members in groups] == [
        ["Q4_K_M", labels[2], labels[3]], ["Q2_K"]]
    with pytest.raises(FaultCellsError, match="add up to"):
        with_fault_cells(DEFAULT, ["unknown_tool=0.8,schema_violation=0.8"])
    assert parser().parse_args(["--inject-faults", "unknown_tool=0.2",
                                "unknown_tool=0.4"]).inject_faults == [
        "unknown_tool=0.2", "unknown_tool=0.4"]


def gold_model(body: dict[str, Any]) -> Scripted:
    """SIMULATED: the gold call of mock's update_task_1, then a closing text once the
    environment has answered it."""
    for message in body["messages"]:
        content = str(message.get("content") or "")
        if message["role"] == "tool" and content.lstrip().startswith("{") and \
                "completed" in content:
            return Scripted(text_completion("Task task_1 is now completed."))
    return Scripted(tool_call_completion("update_task_status",
                                         {"task_id": "task_1", "status": "completed"}))


def test_injected_damage_is_recorded_apart_from_natural_errors(tmp_path: Path) -> None:
    with threaded_fake(FakeUpstream(default=gold_model)) as (fake, base_url):
        config = with_fault_cells(CellsConfig(max_repairs=1, models=[ModelEntry(
            name="fake", family="fake (SIMULATED model)", precisions=[Precision(
                label="fake", reference=True,
                endpoint=Endpoint(base_url=base_url, model="fake-upstream"))])]),
            ["unknown_tool=1"])
        records = run(config, RunOptions(out=tmp_path, arms=ARMS, domains=["mock"],
                                         task_ids=["update_task_1"], max_errors=3,
                                         episode_timeout=120))
    assert fake.calls > 0
    by = {(r.cell.precision_key, r.arm): r for r in records}
    natural, injected = "fake", "fake+inject:unknown_tool=1,seed=0,reasks=off"
    assert by[natural, "off"].success and by[natural, "on"].success
    assert by[natural, "off"].proxy.injected is not None
    assert by[natural, "off"].proxy.injected.injected == 0
    damaged = by[injected, "off"]
    assert not damaged.success and damaged.proxy.injected is not None
    assert damaged.proxy.injected.first == {"unknown_tool": damaged.proxy.injected.requests}
    assert damaged.calls and all(c.injected for c in damaged.calls if c.error)
    repaired = by[injected, "on"]
    assert repaired.success and repaired.proxy.injected is not None
    assert repaired.proxy.injected.repaired == repaired.proxy.injected.requests >= 1
    assert not any(c.error for c in repaired.calls)
    # The off and on arms saw the same fault on their first answer.
    first = []
    for arm in ARMS:
        events = [json.loads(line) for line in (tmp_path / "events" / (
            f"fake@{injected}_mock-{arm}.jsonl")).read_text().splitlines()]
        first.append(next(c["injected_detail"] for e in events if e["event"] == "attempt"
                          for c in e["calls"] if "injected" in c))
    assert first[0] == first[1]
    summary = build_report(tmp_path)
    rows = summary["faults"]["cells"]
    assert rows[f"fake@{injected}/mock"]["off"]["env_errors"]["natural"] == 0
    assert rows[f"fake@{injected}/mock"]["off"]["env_errors"]["injected"] >= 1
    assert rows[f"fake@{natural}/mock"]["off"]["injected_first"] == {}
    report = (tmp_path / "report.md").read_text()
    assert "## Injected faults beside natural errors" in report
    assert "| repair | K | natural | INJECTED unknown_tool=1 |" in report
    assert (tmp_path / "masking.png").is_file()


MIXED = "unknown_tool=0.14,malformed_args=0.13,schema_violation=0.13"


def test_a_long_spec_cell_still_joins_its_events(tmp_path: Path) -> None:
    """The mixed spec's cell key is longer than the session reflexguard keeps (it clips at
    LABEL_LIMIT); the bench's session must stay whole, or no event joins its episode."""
    with threaded_fake(FakeUpstream(default=gold_model)) as (_, base_url):
        config = with_fault_cells(CellsConfig(max_repairs=1, models=[ModelEntry(
            name="qwen2.5-coder-0.5b", family="fake (SIMULATED model)", precisions=[Precision(
                label="Q4_K_M", reference=True,
                endpoint=Endpoint(base_url=base_url, model="fake-upstream"))])]), [MIXED])
        records = run(config, RunOptions(out=tmp_path, arms=["on"], domains=["mock"],
                                         task_ids=["update_task_1"], max_errors=3,
                                         episode_timeout=120))
    damaged = next(r for r in records if "inject" in r.cell.precision_key)
    assert len(damaged.cell.key) + len("|on|update_task_1|0") > LABEL_LIMIT
    assert damaged.proxy.first_attempt_channels, "the episode joined no events"
    assert damaged.proxy.injected is not None and damaged.proxy.injected.requests >= 1


def test_a_session_key_is_never_clipped_and_names_one_episode() -> None:
    short = session_key("m@Q4_K_M/mock", "on", "create_task_1", 0)
    assert short == "m@Q4_K_M/mock|on|create_task_1|0"  # as the committed records have it
    cell = f"qwen2.5-coder-0.5b@Q4_K_M+inject:{MIXED},seed=0,reasks=off/mock"
    keys = {session_key(cell, arm, task, trial) for arm in ARMS + ["on+budget"]
            for task in ("create_task_1", "update_task_1") for trial in range(3)}
    assert len(keys) == 18
    assert all(len(k) <= LABEL_LIMIT and safe_label(k) == k for k in keys)
    other = session_key(cell.replace("0.14", "0.15"), "on", "create_task_1", 0)
    assert other not in keys  # another spec, another cell
