"""`reflexguard screen` on events the real proxy wrote, and its one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reflexguard.cli import screen as screen_cli
from reflexguard.cli.main import main
from tests.fakes.fake_upstream import Scripted
from tests.fakes.vllm_logprobs import native_two_calls

CALIBRATION = Path(__file__).parent / "fixtures/TEST_FIXTURE_margin_calibration.json"
OPEN = {"type": "object", "properties": {}}
TOOLS = [{"type": "function", "function": {"name": name, "parameters": OPEN}}
         for name in ("get_order_details", "cancel_pending_order")]
BODY = {"model": "m", "tools": TOOLS, "messages": [{"role": "user", "content": "Cancel #W123."}]}


def run(*argv: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    code = exited.value.code
    assert isinstance(code, int)
    return code


def write_events(path: Path, *records: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def initial(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"event": "attempt", "kind": "initial", "calls": list(calls)}


async def test_screen_reads_what_the_proxy_wrote(fake, proxy, tmp_path, capsys):
    upstream, _ = fake
    upstream.script = [Scripted(native_two_calls()) for _ in range(3)]
    client = await proxy(margins=True, margin_threshold=1.0)
    for _ in range(3):
        assert (await client.post("/v1/chat/completions", json=BODY)).status == 200
    events = tmp_path / "events.jsonl"
    assert run("screen", str(events), "--calibration", str(CALIBRATION),
               "--json", str(tmp_path / "s.json")) == 0
    markdown = capsys.readouterr().out
    assert "SIMULATED" in markdown
    assert "| `get_order_details` | 3 | 3 | 100.0% | 30.0% | 20.0% |" in markdown
    assert "| `cancel_pending_order` | 3 | 3 | 0.0% | 2.0% | 0.0% |" in markdown
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["overall"]["decisions"] == 6 and data["overall"]["thin"] == 3


def test_a_run_directory_with_a_candidate(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    write_events(run_dir / "events/m@Q4_K_M_mock-on.jsonl",
                 initial({"channel": "ok", "name": "a", "detail": "", "name_margin": 0.1}))
    write_events(run_dir / "events/m@Q2_K_mock-on.jsonl",
                 initial({"channel": "unknown_tool", "name": "b", "detail": ""}),
                 initial({"channel": "ok", "name": "a", "detail": ""}))
    (run_dir / "events/m@Q2_K_mock-on.jsonl").open("a").write("not json\n")
    out = tmp_path / "screen"
    assert run("screen", str(run_dir), "--match", "@Q4_K_M", "--candidate", str(run_dir),
               "--candidate-match", "@Q2_K", "--calibration", str(CALIBRATION),
               "--out", str(out)) == 0
    data = json.loads((out / "screen.json").read_text())
    assert data["overall"]["decisions"] == 1
    assert data["overall"]["predicted_error_rate"] == pytest.approx(0.6)
    assert data["overall"]["candidate_rate"] == pytest.approx(0.5)
    assert data["sources"]["candidate_skipped_lines"] == 1
    assert "observed at the candidate" in (out / "screen.md").read_text()
    assert "wrote" in capsys.readouterr().out


def test_events_without_margins_are_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = write_events(tmp_path / "e.jsonl", initial({"channel": "ok", "name": "a",
                                                         "detail": ""}))
    assert run("screen", str(events), "--calibration", str(CALIBRATION)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no tool call carries margins" in err


def test_without_a_calibration_the_prediction_asks_for_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(screen_cli, "SHIPPED_CALIBRATION", tmp_path / "absent.json")
    events = write_events(tmp_path / "e.jsonl", initial(
        {"channel": "ok", "name": "a", "detail": "", "name_margin": 2.0}))
    assert run("screen", str(events)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a margin calibration" in err


@pytest.mark.parametrize("problem", ["missing", "bad_calibration", "empty_dir"])
def test_bad_input_is_one_line_never_a_traceback(tmp_path: Path, problem: str) -> None:
    events = write_events(tmp_path / "e.jsonl", initial(
        {"channel": "ok", "name": "a", "detail": "", "name_margin": 2.0}))
    calibration = CALIBRATION
    if problem == "missing":
        events = tmp_path / "nope.jsonl"
    elif problem == "bad_calibration":
        calibration = tmp_path / "bad.json"
        calibration.write_text('{"schema": "reflexguard.margin_calibration/1", "bins": []}')
    else:
        (tmp_path / "empty").mkdir()
        events = tmp_path / "empty"
    done = subprocess.run([sys.executable, "-m", "reflexguard", "screen", str(events),
                           "--calibration", str(calibration)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr



def test_serve_flags_reach_the_margin_settings() -> None:
    from reflexguard.cli.main import _flags, parser
    from reflexguard.ops.config import Settings

    flags = _flags(parser().parse_args(["serve", "--margins", "on",
                                        "--margin-threshold", "0.8"]))
    settings = Settings(**flags)
    assert settings.margins is True and settings.margin_threshold == 0.8
    assert Settings().margins is False


def test_the_shipped_calibration_is_a_real_one() -> None:
    from reflexguard.core.screen import parse_calibration

    shipped = parse_calibration(json.loads(screen_cli.SHIPPED_CALIBRATION.read_text()))
    assert not shipped.simulated and (shipped.reference, shipped.candidate) == ("Q4_K_M", "Q2_K")
    assert "bench.margins" in shipped.source
