"""`bench.compare`'s `main` over several command lines in ONE fresh interpreter.

`python -m tests.bench.tau2.compare_cases JSON` takes a JSON list of argument lists and
prints one JSON line per case: the exit status and everything written to file descriptor 2
while it ran (as a process's stderr: Python's, structlog's and any C library's). Only
SystemExit is caught, so any other exception escapes with its traceback and the process
fails. Why: the mistakes past the argument checks import tau2 and the report writer
(~9 s of CPU each); one process pays that once (issue 23).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from bench.compare import main


def run_case(args: list[str]) -> dict[str, object]:
    code: object = 0
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        stderr = captured.read().decode(errors="replace")
    return {"args": args, "code": code, "stderr": stderr}


if __name__ == "__main__":
    for case in json.loads(sys.argv[1]):
        print(json.dumps(run_case(case)), flush=True)
