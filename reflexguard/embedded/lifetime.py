"""Child processes that end with their parent: spawning and stopping them.

This is an I/O edge. A child gets its own session (so a terminal's Ctrl-C reaches only
the parent, which then stops it in order) and, on Linux, PR_SET_PDEATHSIG=SIGTERM via
the `deathsig.py` exec wrapper, so even a SIGKILLed parent leaves no llama.cpp behind.
Stopping sends SIGTERM to the child's whole process group, then SIGKILL after a grace.

The death signal is tied to the *thread* that forked: spawn from a thread that lives as
long as the child (the main thread, or the event loop's), never from a short-lived
worker thread, or the child is terminated when that worker exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog

WRAPPER = Path(__file__).with_name("deathsig.py")
STOP_GRACE = 10.0


@dataclass
class Spawned:
    process: subprocess.Popen[bytes]
    follows_parent: bool  # False: PR_SET_PDEATHSIG is not available on this platform


def parent_death_supported() -> bool:
    return sys.platform.startswith("linux")


def spawn(command: list[str], log: IO[bytes] | int, env: dict[str, str] | None = None,
          ) -> Spawned:
    """Start `command` with output to `log`, in its own session, dying with this process."""
    follows = parent_death_supported()
    if follows:
        command = [sys.executable, str(WRAPPER), str(os.getpid()), *command]
    else:
        structlog.get_logger("reflexguard").warning(
            "fallback", kind="parent_death_signal_unavailable", platform=sys.platform,
            detail="the child is stopped on a clean exit, but not if this process is killed")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    return Spawned(process, follows)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # start_new_session made the child a group leader: its group id is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop(process: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """SIGTERM to the child's process group, SIGKILL if it is still there after `grace`."""
    if process.poll() is not None:
        return
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait(grace)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that `finally` blocks and context managers run."""


def _raise_terminated(signum: int, _: object) -> None:
    raise Terminated(f"received {signal.Signals(signum).name}")


def sigterm_as_interrupt() -> None:
    """Make SIGTERM unwind the main thread like Ctrl-C (Python's default just dies, leaving
    every `with model_server(...)` child to the death signal at best). Main thread only."""
    signal.signal(signal.SIGTERM, _raise_terminated)
