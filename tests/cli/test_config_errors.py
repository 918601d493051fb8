"""Every configuration mistake is one line and exit status 2, naming the file and key, the
variable or the flag; every setting has a flag."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reflexguard.cli.main import _flags, parser
from reflexguard.ops.config import OTHER_VARIABLES, ConfigError, Settings, load_settings

ROOT = Path(__file__).parents[2]
UPSTREAM = ["--upstream", "http://127.0.0.1:1/v1"]


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("REFLEXGUARD_")}
    return subprocess.run([sys.executable, "-m", "reflexguard", *args], capture_output=True,
                          text=True, timeout=60, env={**clean, **env})


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("text, fragments", [
    ("upstream: [\n", ["not valid YAML at line 2, column 1"]),
    ("port: 1\n  nested: : x\n", ["not valid YAML at line"]),
    ("- upstream\n- port\n", ["must be a mapping of settings", "not a list"]),
    ("just words\n", ["must be a mapping of settings", "not a str"]),
    ("max_repairz: 3\n", ["unknown key 'max_repairz'", "did you mean max_repairs?"]),
    ("port: eighty\n", ["invalid setting port", "rg.yaml: port", "'eighty'"]),
])
def test_a_bad_config_file_is_one_line_naming_the_file(
        tmp_path: Path, text: str, fragments: list[str]) -> None:
    config = tmp_path / "rg.yaml"
    config.write_text(text)
    line = one_line(run_cli("serve", *UPSTREAM, "--config", str(config)))
    assert str(config) in line
    for fragment in fragments:
        assert fragment in line, line


def test_the_config_file_from_the_environment_is_checked_the_same_way(tmp_path: Path) -> None:
    config = tmp_path / "rg.yaml"
    config.write_text("{{{\n")
    line = one_line(run_cli("serve", *UPSTREAM, REFLEXGUARD_CONFIG=str(config)))
    assert str(config) in line and "not valid YAML" in line


def test_an_empty_file_is_no_settings(tmp_path: Path) -> None:
    config = tmp_path / "rg.yaml"
    config.write_text("# nothing yet\n")
    assert load_settings({}, config).max_repairs == Settings().max_repairs


def test_an_unknown_variable_is_refused_like_an_unknown_key() -> None:
    line = one_line(run_cli("serve", *UPSTREAM, REFLEXGUARD_MAX_REPAIR="3"))
    assert "unknown environment variable REFLEXGUARD_MAX_REPAIR" in line
    assert "did you mean REFLEXGUARD_MAX_REPAIRS?" in line


def test_a_bad_variable_value_names_the_variable() -> None:
    line = one_line(run_cli("serve", *UPSTREAM, REFLEXGUARD_MAX_REPAIRS="many"))
    assert "REFLEXGUARD_MAX_REPAIRS" in line and "'many'" in line


def test_a_bad_flag_value_names_the_flag() -> None:
    line = one_line(run_cli("serve", *UPSTREAM, "--request-timeout", "0"))
    assert "request_timeout (from --request-timeout)" in line


def test_the_projects_own_variables_are_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTHER_VARIABLES - {"REFLEXGUARD_CONFIG"}:
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("reflexguard_port", "9001")  # read case-insensitively, as pydantic does
    assert load_settings({}).port == 9001


def test_every_reflexguard_variable_the_repository_names_is_known() -> None:
    """A variable read anywhere in the project (scripts, docs, tests, the bench) is either
    a setting or listed in OTHER_VARIABLES: otherwise the CLI would refuse it."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    names: set[str] = set()
    for name in files:
        path = ROOT / name
        if path.suffix in (".py", ".sh", ".md", ".yml", ".yaml", ".toml", ".txt", "") \
                and path.is_file():
            names |= set(re.findall(r"REFLEXGUARD_[A-Z0-9_]*[A-Z0-9]",
                                    path.read_text(errors="replace")))
    known = {f"REFLEXGUARD_{field.upper()}" for field in Settings.model_fields}
    typos = {"REFLEXGUARD_MAX_REPAIR"}  # the example of a refused typo, here and in the docs
    assert names - known - OTHER_VARIABLES - typos == set()
    assert "REFLEXGUARD_HOME" in names  # the scan sees what it should


@pytest.mark.parametrize("url, base", [
    ("http://h:8000/v1/chat/completions", "http://h:8000/v1"),
    ("http://h:8000/v1/chat/completions/", "http://h:8000/v1"),
    ("http://h:8000/v1/messages", "http://h:8000/v1"),
    ("https://h/v1/responses", "https://h/v1"),
    ("http://h:8000/chat/completions", "http://h:8000"),
    ("http://h:8000/v1/completions", "http://h:8000/v1"),
    ("http://h:8000/V1/Chat/Completions", "http://h:8000/V1"),
])
def test_an_endpoint_url_is_refused_with_its_base_url(url: str, base: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"upstream": url})
    message = str(refused.value)
    assert "is an endpoint" in message and f"use {base} " in message, message
    assert "\n" not in message


def test_the_fix_shows_no_credentials() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"upstream": "http://me:s3cret@h:8000/v1/chat/completions"})
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize("url", ["http://h:8000/v1", "http://h:8000", "https://api.x.ai/v1",
                                 "https://r.example/openai/deployments/gpt-4o",
                                 "http://[::1]:8000/v1"])
def test_base_urls_are_accepted(url: str) -> None:
    assert load_settings({"upstream": url}).upstream == url


def test_an_endpoint_url_on_the_command_line_is_one_line() -> None:
    line = one_line(run_cli("serve", "--upstream", "http://127.0.0.1:8000/v1/chat/completions"))
    assert "use http://127.0.0.1:8000/v1" in line


def test_every_setting_has_its_flag() -> None:
    serve = parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr,index]
    dests = {action.dest: action for action in serve._actions}
    assert set(Settings.model_fields) - set(dests) == set()
    for name in Settings.model_fields:
        flag = "--" + name.replace("_", "-")
        assert flag in dests[name].option_strings, (name, dests[name].option_strings)


@pytest.mark.parametrize("argv, name, value", [
    (["--request-timeout", "30"], "request_timeout", 30.0),
    (["--upstream-timeout", "12.5"], "upstream_timeout", 12.5),
    (["--json-repair", "on"], "json_repair", True),
    (["--on-exhausted", "error"], "on_exhausted", "error"),
    (["--max-body-bytes", "4096"], "max_body_bytes", 4096),
    (["--log-level", "warning"], "log_level", "warning"),
])
def test_a_flag_reaches_its_setting(argv: list[str], name: str, value: object) -> None:
    args = parser().parse_args(["serve", *UPSTREAM, *argv])
    assert getattr(load_settings(_flags(args)), name) == value
