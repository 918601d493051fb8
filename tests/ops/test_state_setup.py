"""scripts/ensure_redis.sh's branches, with stub commands on PATH (nothing is installed):
present → nothing; missing → apt-get as root or through sudo; no way → a clear error."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure_redis.sh"


def stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def run(tmp_path: Path, *, uid: int, sudo: bool, apt: bool, present: bool
        ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    env_binary = shutil.which("env")
    chmod = shutil.which("chmod")
    assert env_binary is not None and chmod is not None
    (bin_dir / "env").symlink_to(env_binary)
    stub(bin_dir, "id", f"echo {uid}")
    if present:
        stub(bin_dir, "redis-server", "exit 0")
    if apt:
        # Installing puts a redis-server on PATH, as Debian's package does.
        stub(bin_dir, "apt-get", f'echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> {log}\n'
             f'case "$*" in *install*) printf "#!/bin/sh\\n" > {bin_dir}/redis-server; '
             f"{chmod} +x {bin_dir}/redis-server;; esac")
    if sudo:
        stub(bin_dir, "sudo", f'echo "sudo $1" >> {log}\nexec "$@"')
    result = subprocess.run(["/bin/bash", str(SCRIPT)], capture_output=True, text=True,
                            env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, check=False)
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def test_present_installs_nothing(tmp_path: Path) -> None:
    result, calls = run(tmp_path, uid=1000, sudo=True, apt=True, present=True)
    assert result.returncode == 0 and calls == []


def test_root_runs_apt_get_itself(tmp_path: Path) -> None:
    result, calls = run(tmp_path, uid=0, sudo=False, apt=True, present=False)
    assert result.returncode == 0, result.stderr
    assert calls == ["apt-get update -q DEBIAN_FRONTEND=noninteractive",
                     "apt-get install -y -q redis-server DEBIAN_FRONTEND=noninteractive"]


def test_a_user_goes_through_sudo(tmp_path: Path) -> None:
    result, calls = run(tmp_path, uid=1000, sudo=True, apt=True, present=False)
    assert result.returncode == 0, result.stderr
    assert calls == ["sudo env", "apt-get update -q DEBIAN_FRONTEND=noninteractive",
                     "sudo env", "apt-get install -y -q redis-server "
                     "DEBIAN_FRONTEND=noninteractive"]


@pytest.mark.parametrize(("uid", "sudo", "apt", "says"), [
    (1000, False, True, "run as root or install sudo"),
    (0, False, False, "there is no apt-get"),
])
def test_no_way_to_install_is_one_clear_error(tmp_path: Path, uid: int, sudo: bool, apt: bool,
                                              says: str) -> None:
    result, calls = run(tmp_path, uid=uid, sudo=sudo, apt=apt, present=False)
    assert result.returncode == 2 and calls == []
    assert says in result.stderr and len(result.stderr.splitlines()) == 1


def test_setup_calls_it() -> None:
    setup = (SCRIPT.parent / "setup.sh").read_text()
    assert "bash scripts/ensure_redis.sh" in setup
    assert os.access(SCRIPT, os.X_OK)


def test_a_missing_redis_server_fails_the_tests_instead_of_skipping(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.redis_server import RedisServer

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="redis-server is not installed"):
        RedisServer(tmp_path)
