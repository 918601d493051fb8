"""The distributions as a user gets them (issue 31): built with `python -m build`, checked
with `twine check`, the wheel installed into a new virtualenv with nothing else, and run
there as a pip user would, in front of a SIMULATED upstream on loopback.

The slow part (build, resolve, install) runs in its own process from the end of
collection on (install_run.py); these tests wait for it, then run what it installed, from
an empty folder, with no PYTHONPATH, so nothing of the checkout can be imported. It needs
the package index: marked `network`, still part of CI.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reflexguard.ops.install import EMBEDDED_EXTRA, SETUP_SCRIPT
from reflexguard.ops.loopback import free_port
from tests.conftest import TOOLS, chat_body
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion
from tests.fakes.threaded_upstream import threaded_fake
from tests.packaging.install_run import ROOT, Installed, clean_env, start

pytestmark = pytest.mark.network

WAIT = 60.0  # a bound on a hang, not a measure of speed
EMBEDDED_WAIT = 300.0  # the model's load and first token on 2 busy cores, likewise
VALID = {"order_id": "#W1234567", "detail": "full"}
# `detail` is required: the guard must re-ask, and the second answer is valid.
MISSING = {"order_id": "#W1234567"}
CALIBRATION = "reflexguard/data/margin_calibration.json"  # what `screen` uses by default

GUARD_SCRIPT = """
import json, sys
import openai, reflexguard
client = reflexguard.guard(openai.OpenAI(base_url=sys.argv[1], api_key="unused",
                                         max_retries=0))
reply = client.chat.completions.create(model="m", messages=json.loads(sys.argv[2]),
                                       tools=json.loads(sys.argv[3]))
call = reply.choices[0].message.tool_calls[0]
print(json.dumps({"name": call.function.name, "arguments": json.loads(call.function.arguments),
                  "module": reflexguard.__file__}))
"""

CONTENTS_SCRIPT = """
import importlib.metadata, importlib.util, json
import reflexguard
dist = importlib.metadata.distribution("reflexguard")
print(json.dumps({"module": reflexguard.__file__,
                  "top_level": (dist.read_text("top_level.txt") or "").split(),
                  "bench": importlib.util.find_spec("bench") is not None}))
"""


@pytest.fixture(scope="module")
def installed() -> Installed:
    # Started when collection ended (tests/packaging/conftest.py), or now.
    job = start()
    code, output = job.wait()
    assert code == 0, output
    print("steps (s):", job.steps())
    return job


def _wheel(installed: Installed) -> Path:
    (wheel,) = installed.dist.glob("*.whl")
    return wheel


def _version(installed: Installed) -> str:
    return _wheel(installed).name.split("-")[1]


def _run(command: list[str | Path], installed: Installed,
         **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=installed.work, env=clean_env(**env),
                          capture_output=True, text=True, timeout=WAIT)


def test_every_step_ran(installed: Installed) -> None:
    steps = installed.steps()
    for step in ("build", "twine check", "venv", "pip install"):
        assert isinstance(steps.get(step), float), (step, steps)


def test_the_wheel_holds_the_library_alone(installed: Installed) -> None:
    names = zipfile.ZipFile(_wheel(installed)).namelist()
    top = Counter(name.split("/")[0] for name in names)
    print("wheel top level:", dict(top))
    info = f"reflexguard-{_version(installed)}.dist-info"
    assert set(top) == {"reflexguard", info}
    assert "reflexguard/py.typed" in names  # PEP 561: a user's mypy reads our hints
    assert CALIBRATION in names
    assert f"{info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(_wheel(installed)).read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()


def test_the_sdist_carries_the_licence_and_changelog_and_no_bench(
        installed: Installed) -> None:
    (sdist,) = installed.dist.glob("*.tar.gz")
    prefix = f"reflexguard-{_version(installed)}/"
    with tarfile.open(sdist) as archive:
        names = {member.name.removeprefix(prefix) for member in archive.getmembers()}
        licence = archive.extractfile(prefix + "LICENSE")
        assert licence is not None and licence.read() == (ROOT / "LICENSE").read_bytes()
    assert {"CHANGELOG.md", "README.md", "pyproject.toml", CALIBRATION} <= names
    assert not [name for name in names if name.startswith(("bench/", "tests/", "results/"))]


def test_the_installed_command_prints_the_wheels_version(installed: Installed) -> None:
    done = _run([installed.venv_bin / "reflexguard", "--version"], installed)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"reflexguard {_version(installed)}\n"


def test_the_virtualenv_imports_reflexguard_from_the_wheel_and_no_bench(
        installed: Installed) -> None:
    done = _run([installed.venv_bin / "python", "-c", CONTENTS_SCRIPT], installed)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert Path(found["module"]).is_relative_to(installed.directory / "venv"), found
    assert found["top_level"] == ["reflexguard"]
    assert found["bench"] is False


def _repairable() -> FakeUpstream:
    return FakeUpstream(script=[
        Scripted(completion=tool_call_completion("get_order_details", MISSING)),
        Scripted(completion=tool_call_completion("get_order_details", VALID))])


@contextmanager
def _serving(installed: Installed, upstream: str | None, bin_dir: Path | None = None,
             wait: float = WAIT) -> Iterator[str]:
    """The installed `reflexguard serve` (in front of `upstream`, or the embedded model
    when None), its base URL once /healthz answers 200 (503 while a model loads)."""
    port = free_port()
    target = ["--upstream", upstream] if upstream is not None else []
    process = subprocess.Popen(
        [(bin_dir or installed.venv_bin) / "reflexguard", "serve", *target,
         "--port", str(port)], cwd=installed.work, env=clean_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + wait
        while True:
            assert process.poll() is None, process.communicate()[1][-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "reflexguard serve never answered"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def test_the_installed_serve_repairs_a_call_from_a_fake_upstream(
        installed: Installed) -> None:
    with threaded_fake(_repairable()) as (fake, upstream), _serving(installed, upstream) as url:
        request = urllib.request.Request(f"{url}/v1/chat/completions",
                                         data=json.dumps(chat_body()).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            assert response.status == 200
            reply = json.loads(response.read())
    (call,) = reply["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == VALID
    assert fake.calls == 2  # the invalid first answer was re-asked


def test_the_installed_guard_repairs_through_an_openai_client(installed: Installed) -> None:
    body = chat_body()
    with threaded_fake(_repairable()) as (fake, upstream):
        done = _run([installed.venv_bin / "python", "-c", GUARD_SCRIPT, upstream,
                     json.dumps(body["messages"]), json.dumps(TOOLS)], installed)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert Path(found["module"]).is_relative_to(installed.directory / "venv"), found
    assert (found["name"], found["arguments"]) == ("get_order_details", VALID)
    assert fake.calls == 2


def test_a_wheel_user_without_the_runtime_is_told_the_extra(installed: Installed,
                                                             tmp_path: Path) -> None:
    done = _run([installed.venv_bin / "reflexguard", "serve", "--port", str(free_port())],
                installed, REFLEXGUARD_HOME=str(tmp_path))
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()  # one line, no traceback
    assert EMBEDDED_EXTRA in line and SETUP_SCRIPT not in line, line


def test_uv_tool_install_gives_a_working_command(installed: Installed) -> None:
    step = installed.steps().get("uv tool install")
    if isinstance(step, str):
        pytest.skip(step)
    done = _run([installed.uv_bin / "reflexguard", "--version"], installed)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"reflexguard {_version(installed)}\n"


def test_the_embedded_extra_serves_the_embedded_model(installed: Installed) -> None:
    """`pip install 'reflexguard[embedded]'`, then `reflexguard serve` with no upstream: the
    embedded default (weights from the model cache the test command fetched) answers a
    guarded chat request."""
    step = installed.steps().get("pip install [embedded]")
    if isinstance(step, str):
        pytest.skip(step)
    with _serving(installed, None, installed.embedded_bin, EMBEDDED_WAIT) as url:
        request = urllib.request.Request(
            f"{url}/v1/chat/completions",
            data=json.dumps({**chat_body(), "max_tokens": 64, "temperature": 0}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=EMBEDDED_WAIT) as response:
            assert response.status == 200
            assert response.headers["x-reflexguard-attempts"]  # guarded, not passed through
            reply = json.loads(response.read())
    assert reply["choices"][0]["message"]["role"] == "assistant", reply
