"""Children die with their parent: SIGKILL of the parent, SIGTERM of the parent, and stop().

A real parent process spawns a long-sleeping child through reflexguard's spawning code
(lifetime.spawn, which model_server and the supervisor use), prints the child's pid, and
is then killed. The child must be gone within a few seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from reflexguard.embedded import lifetime
from reflexguard.embedded.exits import describe_exit
from tests.fakes.processes import is_running

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux-only")

PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from reflexguard.embedded import lifetime
    if sys.argv[1] == "bench":
        lifetime.sigterm_as_interrupt()  # what bench.compare installs
    spawned = lifetime.spawn([sys.executable, "-c", "import time; time.sleep(120)"],
                             subprocess.DEVNULL)
    try:
        print(spawned.process.pid, flush=True)  # inside try: a SIGTERM may come at once
        time.sleep(120)
    finally:
        lifetime.stop(spawned.process)
        print("cleaned up", flush=True)
""")


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not is_running(pid):
            return True
        time.sleep(0.05)
    return False


def start_parent(mode: str) -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 10
    # The wrapper execs into the child command: wait until it has (its cmdline says sleep).
    while b"sleep" not in Path(f"/proc/{child}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert is_running(child)
    return parent, child


def test_the_child_dies_when_its_parent_is_sigkilled() -> None:
    parent, child = start_parent("plain")
    try:
        parent.send_signal(signal.SIGKILL)  # no cleanup runs in the parent
        parent.wait(10)
        assert gone_within(child, 5), "the child outlived its SIGKILLed parent"
    finally:
        if is_running(child):
            os.kill(child, signal.SIGKILL)


def test_sigterm_unwinds_the_parent_and_its_cleanup_stops_the_child() -> None:
    parent, child = start_parent("bench")
    try:
        parent.send_signal(signal.SIGTERM)
        out, _ = parent.communicate(timeout=15)
        assert "cleaned up" in out  # the finally block ran: SIGTERM unwound like Ctrl-C
        assert gone_within(child, 5)
    finally:
        if is_running(child):
            os.kill(child, signal.SIGKILL)


def test_sigterm_without_a_handler_still_takes_the_child() -> None:
    parent, child = start_parent("plain")
    try:
        parent.send_signal(signal.SIGTERM)  # Python's default: die at once, no finally
        parent.wait(10)
        assert gone_within(child, 5)
    finally:
        if is_running(child):
            os.kill(child, signal.SIGKILL)


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \
             "'import time; time.sleep(120)']); print('up', flush=True); time.sleep(120)"
    log = tmp_path / "log"
    with log.open("wb") as handle:
        spawned = lifetime.spawn([sys.executable, "-u", "-c", script], handle)
    deadline = time.monotonic() + 10
    while "up" not in log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    grandchildren = [int(p) for p in subprocess.run(
        ["pgrep", "-g", str(spawned.process.pid)], capture_output=True, text=True,
    ).stdout.split() if int(p) != spawned.process.pid]
    assert grandchildren
    lifetime.stop(spawned.process, grace=5)
    assert spawned.process.returncode is not None
    for pid in grandchildren:
        assert gone_within(pid, 5)


@pytest.mark.parametrize(("code", "what", "phrase"), [
    (-4, "SIGILL", "CPU instructions this machine cannot run"),
    (-9, "SIGKILL", "out-of-memory"),
    (132, "exit code 132 (SIGILL)", "CPU instructions"),
    (1, "exit code 1", "exited with an error"),
])
def test_exit_descriptions(code: int, what: str, phrase: str) -> None:
    reason = describe_exit(code)
    assert reason.what == what
    assert phrase in reason.cause
