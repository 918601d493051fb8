"""Run as a script: `python deathsig.py PARENT_PID CMD...` -> CMD that dies with its parent.

An I/O edge, and deliberately standard-library only: it runs as a file, before the real
command replaces it, so it must not import reflexguard. It asks Linux to send SIGTERM
to this process when its parent dies (PR_SET_PDEATHSIG, which survives execve), then
execs CMD.

Why an exec wrapper and not Popen's `preexec_fn`: preexec_fn runs Python between fork
and exec, which the subprocess docs warn can deadlock when other threads exist (the
bench runs episodes in threads, tqdm has a monitor thread), so the prctl call happens
here instead, in a fresh single-threaded process.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: deathsig.py PARENT_PID CMD...", file=sys.stderr)
        return 2
    parent, command = int(argv[1]), argv[2:]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        # Better to run unguarded than not at all; the parent's own stop still works.
        print(f"reflexguard: PR_SET_PDEATHSIG unavailable ({exc}); this process will not "
              f"follow its parent's death", file=sys.stderr, flush=True)
    if os.getppid() != parent:
        # The parent died between fork and prctl: the signal will never come.
        return 1
    os.execvp(command[0], command)
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv))
