"""A slow set-up started in its own process when collection ends, waited for by its test.

The BFCL pipeline's run (tests/bench/bfcl/pipeline_run.py) and pip's resolution
(tests/frameworks/resolution.py) are each one command whose minute or so then passes
beside the tests collected before theirs. Each is started once per session, its output in
a log inside a temporary folder of its own, waited for within a bound, and killed (its
folder removed) when the session ends if nobody waited for it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar


@dataclass
class Background:
    process: subprocess.Popen[bytes]
    directory: Path
    log: Path
    timeout_s: float  # a bound on a hang, not a measure
    group: bool = False  # its own process group: a kill ends the commands it started too

    def wait(self) -> tuple[int, str]:
        """The command's exit status and the tail of its output."""
        try:
            code = self.process.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            self._kill()
            raise
        return code, self.log.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        """Killed if still running; its folder removed."""
        if self.process.poll() is None:
            self._kill()
        shutil.rmtree(self.directory, ignore_errors=True)


    def _kill(self) -> None:
        if self.group:
            with suppress(ProcessLookupError):  # already gone
                os.killpg(self.process.pid, signal.SIGKILL)
        else:
            self.process.kill()
        self.process.wait()


B = TypeVar("B", bound=Background)


def launch(kind: type[B], prefix: str, log_name: str, timeout_s: float,
           command: Callable[[Path], list[str]], cwd: Path | None = None,
           group: bool = False) -> B:
    """`command(folder)` started with its output in folder/log_name, as a `kind`; with
    `group`, in a process group of its own, so that stopping it stops its children."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    log = directory / log_name
    with log.open("wb") as out:
        process = subprocess.Popen(command(directory), cwd=cwd, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=group)
    return kind(process, directory, log, timeout_s, group)
