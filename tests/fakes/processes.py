"""Whether a process a test started is still there (no I/O beyond /proc)."""

from __future__ import annotations

from pathlib import Path


def is_running(pid: int) -> bool:
    """Alive and not a zombie awaiting its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
