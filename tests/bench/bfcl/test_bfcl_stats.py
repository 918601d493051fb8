"""The BFCL bench's pure parts: samples, exact tests, amplification, the summary's verdicts."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bench.bfcl.cap import capped
from bench.bfcl.categories import CategoryError, check_categories, sample
from bench.bfcl.collect import case_records, proxy_fields
from bench.stats import bfcl
from bench.stats.bfcl_records import CaseRecord
from bench.stats.bfcl_summary import summarise
from bench.tau2.cells import Precision


def case(case_id: str, correct: bool, arm: str = "off", precision: str = "Q4_K_M (as shipped)",
         reference: bool = True, channels: dict[str, int] | None = None,
         names: dict[str, int] | None = None, **fields: Any) -> CaseRecord:
    return CaseRecord(model="m", family="f", precision=precision, reference=reference,
                      arm=arm, category=case_id.rsplit("_", 1)[0], case_id=case_id,
                      correct=correct, first_attempt_channels=channels or {"ok": 1},
                      unknown_tool_names=names or {}, requests=1, **fields)


def test_exact_mcnemar_matches_the_binomial() -> None:
    assert bfcl.mcnemar_exact(0, 6) == pytest.approx(2 * 0.5 ** 6)
    assert bfcl.mcnemar_exact(3, 3) == 1.0
    assert bfcl.mcnemar_exact(0, 0) == 1.0
    assert bfcl.mcnemar_greater(5, 0) == pytest.approx(0.5 ** 5)
    assert bfcl.mcnemar_greater(0, 5) == 1.0


def test_holm_steps_down_and_stays_monotone() -> None:
    adjusted = bfcl.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})


def test_paired_lists_fixed_and_broken_cases_in_bfcl_order() -> None:
    off = [case("simple_python_9", False), case("simple_python_10", False),
           case("simple_python_2", True), case("simple_python_3", True)]
    on = [case("simple_python_9", True, "on"), case("simple_python_10", True, "on"),
          case("simple_python_2", False, "on"), case("simple_python_3", True, "on"),
          case("simple_python_4", True, "on")]  # not in off: not paired
    result = bfcl.paired(off, on)
    assert result.pairs == 4
    assert result.fixed == ("simple_python_9", "simple_python_10")
    assert result.broken == ("simple_python_2",)
    assert result.difference == pytest.approx(0.25)
    assert result.p_value == pytest.approx(bfcl.mcnemar_exact(2, 1))


def test_amplification_is_a_ratio_of_rates_with_an_interval_around_it() -> None:
    ref = [case(f"multiple_{i}", True, channels={"unknown_tool": 1} if i < 2 else {"ok": 1})
           for i in range(20)]
    low = [case(f"multiple_{i}", True, precision="Q2_K (requantized)", reference=False,
                channels={"unknown_tool": 1} if i < 6 else {"ok": 1}) for i in range(20)]
    ratio = bfcl.amplification(ref, low, "unknown_tool")
    assert ratio.value == pytest.approx(3.0)
    assert ratio.low is not None and ratio.high is not None
    assert ratio.low <= 3.0 <= ratio.high
    assert (ratio.reference_count, ratio.lower_count) == (2, 6)
    never = bfcl.amplification(ref, low, "malformed_args")
    assert never.value is None
    only_low = bfcl.amplification(low, ref, "unknown_tool")  # swapped: defined, below one
    assert only_low.value == pytest.approx(1 / 3)
    clean = [case(f"multiple_{i}", True) for i in range(20)]
    assert bfcl.amplification(clean, low, "unknown_tool").value == math.inf


def test_the_sample_is_fixed_nested_and_in_bfcl_order() -> None:
    ids = [f"multiple_{i}" for i in range(200)]
    small, large = sample("multiple", ids, 5, 20), sample("multiple", ids, 30, 20)
    assert small == sample("multiple", list(reversed(ids)), 5, 20)
    assert set(small) <= set(large) and len(large) == 30
    assert small == sorted(small, key=lambda i: int(i.rsplit("_", 1)[1]))
    assert sample("multiple", ids, 5, 21) != small
    assert sample("multiple", ids, None, 20) == ids


def test_live_categories_are_refused() -> None:
    with pytest.raises(CategoryError, match="reserved"):
        check_categories(["simple_python", "live_simple"])
    with pytest.raises(CategoryError, match="unknown"):
        check_categories(["nonsense"])
    assert check_categories(["irrelevance", "irrelevance"]) == ["irrelevance"]


def test_the_cap_applies_only_where_no_limit_is_set() -> None:
    body = json.dumps({"model": "m", "messages": []}).encode()
    assert json.loads(capped(body, 512))["max_tokens"] == 512
    own = json.dumps({"model": "m", "max_tokens": 64}).encode()
    assert capped(own, 512) is own
    assert capped(b"not json", 512) == b"not json"


def test_null_assistant_content_goes_to_the_model_server_as_an_empty_string() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "content": "ok", "tool_call_id": "c"}]
    sent = json.loads(capped(json.dumps({"messages": history, "max_tokens": 9}).encode(), 512))
    assert sent["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert sent["messages"][0] == history[0] and sent["messages"][2] == history[2]
    assert sent["max_tokens"] == 9


def test_events_and_bfcl_scores_become_records() -> None:
    events: list[Any] = [
        {"event": "attempt", "ts": 0.0, "request_id": "r", "session": "simple_python_1",
         "model": "m", "attempt": 1, "kind": "initial", "toolset": "t", "latency_ms": 1.0,
         "stream": False, "fixes": [],
         "calls": [{"channel": "unknown_tool", "name": "made_up", "detail": ""}]},
        {"event": "attempt", "ts": 0.0, "request_id": "r", "session": "simple_python_1",
         "model": "m", "attempt": 2, "kind": "reask", "toolset": "t", "latency_ms": 1.0,
         "stream": False, "fixes": [], "calls": [{"channel": "ok", "name": "f", "detail": ""}]},
        {"event": "outcome", "ts": 0.0, "outcome": "fixed_by_reask", "request_id": "r",
         "session": "simple_python_1"},
        {"event": "attempt", "ts": 0.0, "request_id": "r", "session": "simple_python_1",
         "model": "m", "attempt": 3, "kind": "loop", "toolset": "t", "latency_ms": 1.0,
         "stream": False, "fixes": [], "calls": [{"channel": "ok", "name": "g", "detail": ""}]},
        {"event": "repeated_call", "ts": 0.0, "request_id": "r", "session": "simple_python_1",
         "dialect": "chat", "action": "replaced", "reason": None,
         "calls": [{"name": "f", "times": 2}]}]
    fields = proxy_fields(events)
    # Nothing injected here: the first answer's error is the model's own (natural).
    injected = fields.pop("injected")
    assert injected.natural_first == {"unknown_tool": 1} and injected.injected == 0
    assert fields == {"requests": 1, "first_attempt_channels": {"unknown_tool": 1},
                      "unknown_tool_names": {"made_up": 1},
                      "outcomes": {"fixed_by_reask": 1}, "extra_upstream_calls": 2,
                      "repeated_calls": {"replaced": 1}}
    precision = Precision(label="Q4_K_M (as shipped)", reference=True, embedded="Q4_K_M")
    ids = {"simple_python": ["simple_python_0", "simple_python_1", "simple_python_2"]}
    results = {"simple_python_0": {"id": "simple_python_0", "result": [{"f": "{}"}],
                                   "input_token_count": [3, 4], "output_token_count": 5,
                                   "latency": 1.5},
               "simple_python_1": {"id": "simple_python_1",
                                   "result": "Error during inference: timeout"}}
    scores = {"simple_python": ({"accuracy": 0.5}, {"simple_python_1": {
        "id": "simple_python_1", "error": ["Invalid syntax."], "error_type": "ast_decoder"}})}
    records = case_records("m", "f", precision, "on", ids, results, scores,
                           {"simple_python_1": events})
    assert [r.case_id for r in records] == ["simple_python_0", "simple_python_1"]  # _2: unsaved
    first, second = records
    assert first.correct and first.input_tokens == 7 and first.output_tokens == 5
    assert not second.correct and second.inference_error and second.error_type == "ast_decoder"
    assert second.extra_upstream_calls == 2 and second.repeated_calls == {"replaced": 1}


def two_cells(on_irrelevance: list[bool]) -> list[CaseRecord]:
    """A reference that is always right and a lower precision that loses 8 of 10 cases."""
    records = []
    for i in range(10):
        records.append(case(f"multiple_{i}", True))
        records.append(case(f"multiple_{i}", True, "on"))
        records.append(case(f"multiple_{i}", i >= 8, precision="Q2_K (requantized)",
                            reference=False, channels={"unknown_tool": 1},
                            names={"made_up": 1}))
        records.append(case(f"multiple_{i}", i >= 4, "on", precision="Q2_K (requantized)",
                            reference=False, extra_upstream_calls=1, input_tokens=10))
    for i, right in enumerate(on_irrelevance):
        records.append(case(f"irrelevance_{i}", True))
        records.append(case(f"irrelevance_{i}", right, "on"))
    return records


def test_the_summary_finds_the_damaged_cell_and_what_repair_recovered() -> None:
    summary = summarise(two_cells([True, True]))
    low = "m@Q2_K"
    assert summary["damaged_cells"] == {low: True}
    damage = next(d for d in summary["damage"] if d["category"] == "multiple")
    assert (damage["lost"], damage["won"], damage["damaged"]) == (8, 0, True)
    assert summary["repair"][low]["multiple"]["fixed"] == [f"multiple_{i}" for i in range(4, 8)]
    assert summary["recovery"]["damaged"] == {"pairs": 10, "fixed": 4, "broken": 0,
                                              "difference": 0.4}
    assert summary["amplification"][low]["channels"]["unknown_tool"]["ratio"] == "inf"
    assert summary["hallucinated_names"][low]["lower_new"] == 10
    assert summary["cost"][low]["extra_upstream_calls"] == 10


def test_irrelevance_worse_with_repair_is_called_out() -> None:
    summary = summarise(two_cells([True, False, True]))
    assert summary["irrelevance"]["m@Q4_K_M"]["verdict"] == "WORSE with repair on"
    assert summary["irrelevance"]["m@Q4_K_M"]["broken"] == ["irrelevance_1"]


def test_a_strong_effects_p_value_is_kept_not_rounded_to_zero() -> None:
    """40 fixed, none broken: p = 2 * 0.5**40 ≈ 1.8e-12, which four decimals would print 0."""
    off = [case(f"simple_python_{i}", False) for i in range(40)]
    on = [case(f"simple_python_{i}", True, "on") for i in range(40)]
    (row,) = [cell["simple_python"] for cell in summarise(off + on)["repair"].values()]
    assert row["p_value"] == pytest.approx(bfcl.mcnemar_exact(0, 40), rel=1e-2)
    assert 0 < row["p_value"] < 1e-11 and 0 < row["holm_p"] < 1e-11
