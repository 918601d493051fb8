"""A real-model smoke: BFCL's handler and checker against the embedded model (Q4_K_M)
through reflexguard, both arms, two cases. Slow on 2 busy cores (minutes), still in CI.

What a 0.5B model answers is not asserted; that the pipeline carries real answers from
the model to BFCL's checker, joined to reflexguard's events per case, is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bfcl.cells import embedded_cells
from bench.bfcl.runner import RunOptions, run
from bench.report.bfcl_writer import build_bfcl_report

pytestmark = pytest.mark.real_model
CASES = {"simple_python": ["simple_python_0"], "irrelevance": ["irrelevance_0"]}


def test_the_embedded_model_through_bfcl_and_reflexguard(tmp_path: Path) -> None:
    records = run(embedded_cells(["Q4_K_M"]), RunOptions(
        out=tmp_path, arms=["off", "on"], categories=list(CASES), cases=CASES,
        model_threads=1, generation_cap=256))
    assert sorted((r.arm, r.case_id) for r in records) == [
        ("off", "irrelevance_0"), ("off", "simple_python_0"),
        ("on", "irrelevance_0"), ("on", "simple_python_0")]
    for record in records:
        assert not record.simulated and not record.inference_error
        assert record.requests >= 1  # reflexguard's events joined to the case
        assert record.input_tokens > 0 and record.latency_s > 0  # a real answer came back
        assert record.correct or record.error_type  # BFCL's checker gave its verdict
    summary = build_bfcl_report(tmp_path)
    assert summary["simulated"] is False
    assert (tmp_path / "report.md").read_text().startswith("# reflexguard on BFCL\n")
