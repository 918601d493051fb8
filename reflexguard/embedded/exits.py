"""Why a model process ended, in words a person can act on.

Pure but for one look, at import, at where the package lies (ops.install: a wheel user is
told another rebuild command than a checkout user). Shared by the supervisor (a child that
died while serving), `model_server` (a child that died while starting) and `reflexguard
model doctor` (a probe that died), so the same death is explained the same way everywhere.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from reflexguard.ops.install import rebuild_runtime

REBUILD = rebuild_runtime() + ", then check with `reflexguard model doctor`"

# The causes worth naming. A signal not listed here gets the generic explanation.
CAUSES: dict[str, str] = {
    "SIGILL": ("this llama.cpp build uses CPU instructions this machine cannot run; "
               + REBUILD),
    "SIGKILL": ("killed from outside: most often the kernel's out-of-memory killer "
                "(see `dmesg`), or an operator or a container limit"),
    "SIGSEGV": "a crash inside llama.cpp: a damaged model file or a runtime bug; see its log",
    "SIGBUS": "a crash reading the model file: damaged, truncated, or on a failing disk",
    "SIGABRT": "llama.cpp aborted (a failed assertion); the last log lines say which",
    "SIGTERM": "stopped from outside with SIGTERM",
    "SIGINT": "interrupted from outside with SIGINT",
}


@dataclass(frozen=True)
class ExitReason:
    what: str  # "SIGILL", "exit code 1"
    cause: str
    signal: str | None  # the signal's name, when a signal ended it


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(returncode: int) -> ExitReason:
    """subprocess's returncode (negative: killed by that signal) as words."""
    if returncode < 0:
        name = signal_name(-returncode)
        return ExitReason(name, CAUSES.get(name, "ended by a signal; see its log"), name)
    if returncode > 128 and returncode - 128 in set(signal.Signals):
        # A shell or wrapper reports "killed by signal N" as exit code 128+N.
        name = signal_name(returncode - 128)
        return ExitReason(f"exit code {returncode} ({name})",
                          CAUSES.get(name, "ended by a signal; see its log"), name)
    if returncode == 0:
        return ExitReason("exit code 0", "it exited on its own while it should have been "
                          "serving; see its log", None)
    return ExitReason(f"exit code {returncode}", "it exited with an error; the last log "
                      "lines say why", None)
