"""Settings precedence (flags > env > file > defaults) and the command line's errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reflexguard.ops.config import load_settings


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "rg.yaml"
    config.write_text("upstream: http://file:1/v1\nport: 9001\nmax_repairs: 4\nrepair: off\n")
    monkeypatch.setenv("REFLEXGUARD_PORT", "9002")
    monkeypatch.setenv("REFLEXGUARD_MAX_REPAIRS", "5")
    settings = load_settings({"max_repairs": 1}, config)
    assert settings.upstream == "http://file:1/v1"  # file over default
    assert settings.port == 9002  # env over file
    assert settings.max_repairs == 1  # flag over env
    assert settings.repair is False
    assert load_settings({}).max_repairs == 5
    monkeypatch.delenv("REFLEXGUARD_MAX_REPAIRS")
    assert load_settings({}).max_repairs == 2  # default


def test_unknown_keys_in_the_file_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "rg.yaml"
    config.write_text("max_repairz: 3\n")
    with pytest.raises(ValueError):
        load_settings({}, config)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reflexguard", *args], capture_output=True,
                          text=True, timeout=60, env=env)


@pytest.mark.parametrize("args, fragment", [
    (["serve", "--upstream", "ftp://x"], "upstream"),
    (["serve", "--upstream", "http://127.0.0.1:1/v1", "--max-repairs", "99"], "max_repairs"),
    (["serve", "--upstream", "http://127.0.0.1:1/v1", "--config", "/nonexistent.yaml"],
     "config file not found"),
    (["serve", "--upstream", "http://127.0.0.1:1/v1", "--repair", "maybe"], "invalid choice"),
])
def test_cli_mistakes_are_one_line(args: list[str], fragment: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_port_in_use_is_one_line() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", "--upstream", "http://127.0.0.1:1/v1", "--port", str(port))
    assert result.returncode == 2
    assert "cannot listen" in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
