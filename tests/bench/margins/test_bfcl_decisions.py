"""BFCL's cases as margin-study decisions: the request BFCL's own handler builds (its real
code in .venv-bfcl, no model), and the gold call, in the BFCL bench's seeded sample."""

from __future__ import annotations

import json

import pytest

from bench.bfcl import harness
from bench.bfcl.categories import DEFAULT_SEED, sample
from bench.margins.bfcl_decisions import ROOT, BfclDecisionError, bfcl_decisions, decisions_of


def _line(case: str, gold: list[dict[str, object]]) -> str:
    return json.dumps({"id": case, "messages": [{"role": "user", "content": f"q {case}"}],
                       "tools": [{"type": "function", "function": {"name": "f_g"}}],
                       "ground_truth": gold})


def test_each_case_is_one_decision_in_the_samples_order_with_its_first_gold_call() -> None:
    lines = [_line("multiple_9", [{"f_g": {"x": [1]}}, {"h": {}}]), _line("multiple_2", [])]
    built = decisions_of("bfcl_multiple", lines, ["multiple_2", "multiple_9"])
    assert [b.task_id for b in built] == ["multiple_2", "multiple_9"]
    assert built[0].decisions == [] and built[0].skipped == [(0, "no ground truth")]
    [decision] = built[1].decisions
    assert (decision.domain, decision.step, decision.gold_name) == ("bfcl_multiple", 0, "f_g")
    assert decision.gold_arguments == {"x": [1]} and decision.tool_choice == "auto"
    assert decision.messages == [{"role": "user", "content": "q multiple_9"}]


def test_a_case_the_dump_left_out_is_an_error_not_a_gap() -> None:
    with pytest.raises(BfclDecisionError, match="multiple_3"):
        decisions_of("bfcl_multiple", [_line("multiple_2", [])], ["multiple_2", "multiple_3"])


@pytest.mark.skipif(not (ROOT / ".venv-bfcl" / "bin" / "python").exists(),
                    reason=".venv-bfcl is built by scripts/setup_bfcl.sh (scripts/test.sh runs it)")
def test_the_requests_are_bfcls_own_for_the_benchs_sample() -> None:
    built = list(bfcl_decisions("bfcl_parallel_multiple", 3))
    data = harness.data_dir(ROOT)
    ids = sample("parallel_multiple", harness.category_ids(data, "parallel_multiple"), 3,
                 DEFAULT_SEED)
    assert [b.task_id for b in built] == ids
    questions = {json.loads(line)["id"]: json.loads(line)["question"][0] for line in
                 (data / "BFCL_v4_parallel_multiple.json").read_text().splitlines()}
    for task in built:
        [decision] = task.decisions
        assert decision.messages == questions[task.task_id]  # BFCL sends the question as is
        offered = {t["function"]["name"] for t in decision.tools}
        assert all("." not in name for name in offered)  # OpenAI names: BFCL's "_" spelling
        assert decision.gold_name in offered  # the gold call names an offered tool
        assert all(t["type"] == "function" for t in decision.tools)
