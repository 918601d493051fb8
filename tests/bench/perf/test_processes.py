"""A benchmark child that fails says why: the tail of its output is in the error (issue
34: `reflexguard serve ... exited with 1` and nothing else)."""

from __future__ import annotations

import pytest

from bench.perf import processes
from reflexguard.ops.loopback import free_port


def test_a_child_that_exits_before_listening_shows_its_last_words() -> None:
    script = "import sys; print('starting'); sys.exit('no module named opentelemetry')"
    with pytest.raises(RuntimeError) as failed, processes.process(["-c", script],
                                                                  free_port()):
        pass
    message = str(failed.value)
    assert "exited with 1" in message
    assert "starting" in message and "no module named opentelemetry" in message


def test_a_child_that_never_listens_is_an_error_too(monkeypatch) -> None:
    monkeypatch.setattr(processes, "READY_TIMEOUT", 0.5)
    script = "import time; print('waiting', flush=True); time.sleep(30)"
    with pytest.raises(RuntimeError, match="did not listen") as failed, \
            processes.process(["-c", script], free_port()):
        pass
    assert "waiting" in str(failed.value)
