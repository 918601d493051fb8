"""`python -m bench.margins`: user mistakes are one line and exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.margins.__main__ import main


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_an_existing_run_needs_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "decisions.jsonl").write_text("")
    assert "--resume" in _fails(["--out", str(tmp_path), "--domains", "mock"], capsys)


def test_bad_numbers_and_missing_records_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--tasks must be at least 1" in _fails(["--tasks", "0"], capsys)
    assert "no decisions recorded" in _fails(["--report-only", "--out", str(tmp_path)], capsys)
    assert "invalid choice" in _fails(["--variants", "F16"], capsys)
