"""BFCL under injected faults, on SIMULATED case records: the repaired-into-correct shares
by channel, natural faults beside them, cases broken by repair, and the report's labels."""

from __future__ import annotations

from pathlib import Path

from bench.fault_tally import InjectedTally
from bench.report.bfcl_faults import bfcl_fault_lines, fault_plot
from bench.stats.bfcl_faults import bfcl_fault_summary
from bench.stats.bfcl_records import CaseRecord
from bench.stats.bfcl_summary import summarise

INJECTED = "Q4_K_M+inject:unknown_tool=0.4,seed=0,reasks=off (INJECTED faults, simulated)"


def record(precision: str, arm: str, case: str, correct: bool, injected: dict[str, int],
           natural: dict[str, int] | None = None) -> CaseRecord:
    return CaseRecord(model="m", family="f (SIMULATED)", precision=precision,
                      reference="+inject:" not in precision, arm=arm,  # type: ignore[arg-type]
                      category="simple_python", case_id=case, correct=correct,
                      first_attempt_channels={"ok": 1}, simulated=True,
                      injected=InjectedTally(first=injected, natural_first=natural or {},
                                             requests=int(bool(injected))))


def records() -> list[CaseRecord]:
    out = []
    # case: (off correct, on correct, injected on the first answer, natural fault)
    cases = {"a": (False, True, {"unknown_tool": 1}, {}),
             "b": (False, False, {"schema_violation": 1}, {}),
             "c": (True, False, {}, {}),  # broken by repair, no injected fault
             "d": (False, True, {}, {"malformed_args": 1}),  # a natural fault repaired
             "e": (True, True, {}, {})}
    for case, (off, on, injected, natural) in cases.items():
        out.append(record(INJECTED, "off", case, off, injected, natural))
        out.append(record(INJECTED, "on", case, on, injected, natural))
        out.append(record("Q4_K_M (as shipped)", "off", case, case in "ce", {}, natural))
        out.append(record("Q4_K_M (as shipped)", "on", case, case in "cde", {}, natural))
    return out


def test_repaired_into_correct_by_channel_beside_natural_faults():
    summary = bfcl_fault_summary(records())
    [cell] = summary
    assert summary[cell]["natural"] == "m@Q4_K_M"
    row = summary[cell]["categories"]["simple_python"]["injected_cell"]
    assert row["injected_cases"] == 2
    by = row["injected_repaired_correct"]
    assert (by["unknown_tool"]["successes"], by["unknown_tool"]["n"]) == (1, 1)
    assert (by["schema_violation"]["successes"], by["schema_violation"]["n"]) == (0, 1)
    assert (by["any"]["successes"], by["any"]["n"]) == (1, 2)
    assert (row["natural_repaired_correct"]["successes"],
            row["natural_repaired_correct"]["n"]) == (1, 1)
    assert row["fixed"] == 2 and row["broken_without"] == 1
    assert row["broken_with_injected_fault"] == 0


def test_the_report_labels_injected_faults_and_prints_nothing_without_them():
    summary = summarise(records())
    text = "\n".join(bfcl_fault_lines(summary))
    assert "INJECTED unknown_tool → correct" in text and "1/1 100%" in text
    natural_only = [r for r in records() if "+inject:" not in r.precision]
    assert bfcl_fault_lines(summarise(natural_only)) == []


def test_the_plot_is_drawn_for_injected_cells_only(tmp_path: Path) -> None:
    assert fault_plot(summarise(records()), tmp_path / "faults.png")
    assert (tmp_path / "faults.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    natural_only = [r for r in records() if "+inject:" not in r.precision]
    assert not fault_plot(summarise(natural_only), tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_a_cell_is_named_by_its_damage_and_reasks_on_is_kept_apart():
    from bench.stats.faults import fault_label

    assert fault_label("Q4_K_M") == "natural"
    assert fault_label("Q4_K_M+inject:unknown_tool=0.4,seed=0,reasks=off") == \
        "INJECTED unknown_tool=0.4"
    assert fault_label("Q4_K_M+inject:unknown_tool=0.4,seed=0,reasks=on") == \
        "INJECTED unknown_tool=0.4,reasks=on"
