"""Build the distributions and install the wheel as a user would, in a process of its own.

`python -m tests.packaging.install_run DIR` copies the checkout's files (tracked, and untracked
but not ignored: what the next commit holds) to DIR/src, then, each step bounded:
`python -m build` (the sdist, then the wheel built from it), `twine check --strict`, a
new virtualenv DIR/venv with nothing in it but the wheel, its declared dependencies and
openai (from the package index, constrained by requirements/constraints.txt, pip's cache
reused), the wheel with its `embedded` extra in DIR/venv-embedded (llama-cpp-python from
the portable wheel scripts/setup.sh built), and, where uv is installed, `uv tool install`
of the wheel into DIR/uv. It
writes DIR/steps.json (what ran, how long each took) and exits non-zero at the first
failure. The tests in test_distributions.py then run what was installed.

It starts when collection ends (tests/packaging/conftest.py), so its minute or so, mostly waits
on the index and pip's own imports, passes beside the tests collected before it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from reflexguard.embedded.model_store import home as model_home
from tests.fakes.background import Background, launch

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"
TIMEOUT_S = 900.0  # the whole job; a bound on a hang (each step has its own below)
STEP_TIMEOUT_S = 300.0
# Variables that would let the checkout or this environment leak into the new one.
LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "VIRTUAL_ENV",
         "CONDA_PREFIX", "UV_PROJECT_ENVIRONMENT")


@dataclass
class Installed(Background):
    @property
    def dist(self) -> Path:
        return self.directory / "dist"

    @property
    def venv_bin(self) -> Path:
        return self.directory / "venv" / "bin"

    @property
    def embedded_bin(self) -> Path:
        return self.directory / "venv-embedded" / "bin"

    @property
    def uv_bin(self) -> Path:
        return self.directory / "uv" / "bin"

    @property
    def work(self) -> Path:
        """An empty folder to run the installed commands in, far from the checkout."""
        return self.directory / "work"

    def steps(self) -> dict[str, float | str]:
        loaded: dict[str, float | str] = json.loads(
            (self.directory / "steps.json").read_text())
        return loaded


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what points Python at the checkout or at another
    environment; user site-packages off, so the new virtualenv has nothing else."""
    env = {k: v for k, v in os.environ.items() if k not in LEAKS}
    env.update({"PYTHONNOUSERSITE": "1", **extra})
    return env


def uv_command() -> Path | None:
    """uv beside this interpreter (the test extra installs it), else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return beside
    found = shutil.which("uv")
    return Path(found) if found else None


def portable_wheels() -> Path | None:
    """The folder setup.sh built llama-cpp-python's portable wheel into for this machine
    (scripts/llama_build.py names its key), when it holds one."""
    printed = subprocess.run([sys.executable, str(ROOT / "scripts" / "llama_build.py")],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    values = dict(line.split("=", 1) for line in printed.splitlines() if "=" in line)
    key = values.get("LLAMA_BUILD_KEY", "").strip("'")
    keyed = model_home() / "wheels" / f"llama-cpp-python-{key}"
    return keyed if key and any(keyed.glob("llama_cpp_python-*.whl")) else None


_started: list[Installed] = []


def start() -> Installed:
    """The job, started once per session (later calls return the same one)."""
    if not _started:
        _started.append(launch(Installed, "rg-dist-", "install.log", TIMEOUT_S, lambda d: [
            sys.executable, "-m", "tests.packaging.install_run", str(d)], cwd=ROOT, group=True))
    return _started[0]


def stop_all() -> None:
    """At the session's end: a job nobody waited for is killed (pip included), its files
    removed."""
    for started in _started:
        started.stop()
    _started.clear()


def _copy_checkout(into: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def _run(steps: dict[str, float | str], name: str, command: list[str | Path],
         env: dict[str, str], cwd: Path) -> None:
    print(f"== {name}: {' '.join(map(str, command))}", flush=True)
    began = time.monotonic()
    subprocess.run(command, env=env, cwd=cwd, check=True, timeout=STEP_TIMEOUT_S,
                   stdin=subprocess.DEVNULL)
    steps[name] = round(time.monotonic() - began, 1)


def main(directory: Path) -> None:
    steps: dict[str, float | str] = {}
    src, dist, work = directory / "src", directory / "dist", directory / "work"
    work.mkdir()
    try:
        _copy_checkout(src)
        # The isolated build environment's setuptools comes from the constraints too.
        build_env = clean_env(PIP_CONSTRAINT=str(CONSTRAINTS))
        _run(steps, "build", [sys.executable, "-m", "build", "--outdir", dist, src],
             build_env, work)
        _run(steps, "twine check", [sys.executable, "-m", "twine", "check", "--strict",
                                    *sorted(dist.iterdir())], clean_env(), work)
        (wheel,) = dist.glob("*.whl")
        # The base interpreter, not this virtualenv's: a user's venv starts from Python.
        python = Path(getattr(sys, "_base_executable", sys.executable))
        _run(steps, "venv", [python, "-m", "venv", directory / "venv"], clean_env(), work)
        _run(steps, "pip install", [directory / "venv" / "bin" / "python", "-m", "pip",
                                    "install", "--quiet", "-c", CONSTRAINTS, wheel, "openai"],
             clean_env(), work)
        keyed = portable_wheels()
        if keyed is None:
            steps["pip install [embedded]"] = ("skipped: no llama-cpp-python wheel built "
                                               "(scripts/setup.sh builds it)")
        else:
            # A second virtualenv, so the first stays without the runtime (its test says
            # the wheel user is told the extra); the project's portable llama.cpp build
            # from setup's cache, as docs/embedded.md tells a pip user to use it.
            embedded = directory / "venv-embedded"
            _run(steps, "venv [embedded]", [python, "-m", "venv", embedded], clean_env(), work)
            _run(steps, "pip install [embedded]", [
                embedded / "bin" / "python", "-m", "pip", "install", "--quiet", "-c",
                CONSTRAINTS, "--find-links", keyed, f"{wheel}[embedded]"], clean_env(), work)
        uv = uv_command()
        if uv is None:
            steps["uv tool install"] = "skipped: no uv"
        else:
            tools = directory / "uv"
            # Its own tool and bin folders, never the user's; no Python download (the
            # package index is the only network), uv's cache reused.
            _run(steps, "uv tool install", [
                uv, "tool", "install", "--python", python, "--constraints", CONSTRAINTS,
                wheel], clean_env(UV_TOOL_DIR=str(tools / "tools"),
                                  UV_TOOL_BIN_DIR=str(tools / "bin"),
                                  UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1"), work)
    finally:
        (directory / "steps.json").write_text(json.dumps(steps, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
