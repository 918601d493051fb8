"""The report, summary and calibration files from recorded decisions (no model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.margins.records import DecisionStore
from bench.margins.report import SCHEMA, build_report


def _entry(token: str, chosen: float, runner_up: float) -> dict[str, Any]:
    return {"token": token, "logprob": chosen, "bytes": list(token.encode()),
            "top_logprobs": [{"token": token, "logprob": chosen, "bytes": None},
                             {"token": "x", "logprob": runner_up, "bytes": None}]}


def _record(variant: str, task: str, step: int, name: str, margin: float) -> dict[str, Any]:
    pieces = ['{"name": "', name, '", "arguments": {}}']
    text = "".join(pieces)
    entries = [_entry(pieces[0], -0.1, -3.1), _entry(name, -0.01, -0.01 - margin),
               _entry(pieces[2], -0.01, -6.0)]
    completion = {"choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": text},
                               "logprobs": {"content": entries}}]}
    return {"variant": variant, "domain": "mock", "task_id": task, "step": step,
            "gold_name": "get", "chosen_name": name, "channel": "ok", "text": text,
            "seconds": 1.5, "first_of_task": step == 0, "prompt_tokens": 100,
            "reused_tokens": 90, "model": f"qwen-{variant.lower()}", "completion": completion}


def test_report_calibration_and_summary_follow_the_recorded_flips(tmp_path: Path) -> None:
    store = DecisionStore(tmp_path / "decisions.jsonl")
    for t in range(30):
        for step in range(2):
            thin = t % 2 == 1
            margin = 0.1 if thin else 5.0
            store.append(_record("Q4_K_M", f"t{t}", step, "get", margin))
            store.append(_record("Q2_K", f"t{t}", step, "list" if thin else "get", 1.0))
    summary = build_report(tmp_path, "python -m bench.margins --test")
    q2 = summary["candidates"]["Q2_K"]
    assert q2["pairs"] == 60 and q2["flips"]["k"] == 30
    assert q2["name_margin"]["flip"]["auroc"] == 1.0
    assert summary["per_variant"]["Q4_K_M"]["exact_match"]["rate"] == 1.0
    assert summary["per_variant"]["Q2_K"]["exact_match"]["k"] == 30
    calibration = json.loads((tmp_path / "calibration-Q2_K.json").read_text())
    assert calibration["schema"] == SCHEMA and calibration["simulated"] is False
    assert (calibration["reference"], calibration["candidate"]) == ("Q4_K_M", "Q2_K")
    bins = calibration["bins"]
    assert bins[0]["lo"] is None and bins[-1]["hi"] is None
    assert sum(b["n"] for b in bins) == calibration["fit_decisions"]
    assert bins[0]["flip_rate"] == 1.0 and bins[-1]["flip_rate"] == 0.0
    assert 0.1 < calibration["thin_threshold"] <= 5.0
    assert "error_definition" in calibration
    assert (tmp_path / "report.md").read_text().startswith("# Margins study")
    assert (tmp_path / "rates.png").stat().st_size > 0
    assert (tmp_path / "flip_deciles.png").stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["reference"] == "Q4_K_M"


def test_the_report_writes_events_that_reflexguard_screen_reads(tmp_path: Path) -> None:
    from reflexguard.cli.main import run

    store = DecisionStore(tmp_path / "decisions.jsonl")
    for t in range(10):
        thin = t % 2 == 1
        store.append(_record("Q4_K_M", f"t{t}", 0, "get", 0.1 if thin else 5.0))
        store.append(_record("Q2_K", f"t{t}", 0, "list" if thin else "get", 1.0))
    build_report(tmp_path, "python -m bench.margins --test")
    events = tmp_path / "events"
    lines = [json.loads(x) for x in (events / "Q4_K_M.jsonl").read_text().splitlines()]
    assert len(lines) == 10 and all(e["kind"] == "initial" for e in lines)
    assert sum(bool(e["calls"][0].get("thin_margin")) for e in lines) == 5
    out = tmp_path / "screen"
    code = run(["screen", str(events), "--match", "Q4_K_M", "--candidate", str(events),
                "--candidate-match", "Q2_K",
                "--calibration", str(tmp_path / "calibration-Q2_K.json"), "--out", str(out)])
    assert code == 0
    screen = json.loads((out / "screen.json").read_text())
    assert "Q4_K_M" in (out / "screen.md").read_text()
    overall = screen["overall"]
    assert (overall["decisions"], overall["thin"], overall["candidate_decisions"]) == (10, 5, 10)
