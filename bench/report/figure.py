"""The reports' matplotlib: the Agg backend (no display on a CI machine), chosen once,
and how every plot is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

DPI = 110

__all__ = ["plt", "save"]


def save(fig: Any, path: Path) -> None:
    """Lay out, write as PNG, and free the figure (a report draws many)."""
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
