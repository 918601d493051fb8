"""What the Python API raises on top of the client's own errors.

    Exception
     └── ReflexguardError
          ├── RepairExhausted    on_exhausted: error, and no attempt produced a valid reply
          └── UpstreamStreamCut  a guarded stream ended before its reply finished
"""

from __future__ import annotations

from reflexguard.core.attempts import LadderResult


class ReflexguardError(Exception):
    """Base of the errors reflexguard's Python API adds."""


class RepairExhausted(ReflexguardError):
    """The ladder ran out (the proxy's 502 `tool_call_repair_exhausted`)."""

    def __init__(self, message: str, result: LadderResult) -> None:
        super().__init__(message)
        self.result = result


class UpstreamStreamCut(ReflexguardError):
    """The upstream's stream broke or ended early (the proxy's error event)."""
