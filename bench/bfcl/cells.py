"""The BFCL bench's cells: the embedded model at the precisions asked, or a cells.yaml.

`--cells Q4_K_M,Q2_K` names embedded variants (served as bench.compare serves them:
Q4_K_M as shipped, the others requantized from it); a path names a cells.yaml in the
tau2 bench's format (bench/tau2/cells.py), e.g. to put vLLM behind an endpoint.
"""

from __future__ import annotations

from pathlib import Path

from bench.tau2.cells import CellsConfig, ModelEntry, Precision, load_cells
from reflexguard.embedded.variants import SHIPPED, VARIANTS

DEFAULT_PRECISIONS = ("Q4_K_M", "Q2_K")
MODEL = "qwen2.5-coder-0.5b"
FAMILY = "qwen2.5-coder-0.5b-instruct"


def embedded_cells(names: list[str]) -> CellsConfig:
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown embedded precision(s) {', '.join(unknown)} "
                         f"(known: {', '.join(VARIANTS)})")
    if not names:
        raise ValueError("no precision given")
    reference = SHIPPED if SHIPPED in names else names[0]
    precisions = [Precision(
        label=f"{n} (as shipped)" if n == SHIPPED else f"{n} (requantized from {SHIPPED})",
        reference=n == reference, embedded=n,
        # As bench.compare's default cells: the embedded server writes calls as text.
        tool_call_format="content", constrained_retry="response_format") for n in names]
    return CellsConfig(models=[ModelEntry(name=MODEL, family=FAMILY, precisions=precisions)])


def resolve_cells(value: str | None) -> CellsConfig:
    """A comma-separated list of embedded variants, or a path to a cells.yaml."""
    if value is None:
        return embedded_cells(list(DEFAULT_PRECISIONS))
    path = Path(value)
    if value.endswith((".yaml", ".yml")) or path.exists():
        return load_cells(path)
    return embedded_cells([n.strip() for n in value.split(",") if n.strip()])
