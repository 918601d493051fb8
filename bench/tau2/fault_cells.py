"""`--inject-faults SPEC ...`: cells whose model's tool calls are damaged at known rates.

Nothing here does I/O. Each spec adds, beside every model's reference precision, a
variant of it served by the same model server, whose reflexguard runs with
`inject_faults: SPEC` (docs/bench.md, "Injected faults"). The variant is labelled
INJECTED in its precision, so every table and plot that names the cell says so; its key
is `<precision>+inject:<spec>`. A spec with no rate above 0 is the natural cell itself,
which always runs. The damage is simulated; the model that must repair it is real.
"""

from __future__ import annotations

from bench.tau2.cells import CellsConfig, Precision
from reflexguard.core.fault_spec import FaultSpecError, parse_fault_spec

INJECTED_MARK = "+inject:"


class FaultCellsError(ValueError):
    """A spec the bench cannot run: one line."""


def fault_label(base: Precision, spec_text: str) -> str:
    head, _, rest = base.label.partition(" ")
    return (f"{head}{INJECTED_MARK}{spec_text} (INJECTED faults, simulated, on "
            f"{head}{' ' + rest if rest else ''})")


def spec_texts(specs: list[str]) -> list[str]:
    """The canonical text of each spec with a rate above 0, in order, once each."""
    texts: list[str] = []
    for raw in specs:
        try:
            spec = parse_fault_spec(raw)
        except FaultSpecError as exc:
            raise FaultCellsError(f"--inject-faults {raw!r}: {exc}") from None
        if spec is None or not spec.active:
            continue  # rate 0: the natural cell, which runs anyway
        if spec.text() not in texts:
            texts.append(spec.text())
    return texts


def with_fault_cells(config: CellsConfig, specs: list[str]) -> CellsConfig:
    """`config` with an injected variant of each model's reference precision per spec."""
    texts = spec_texts(specs)
    if not texts:
        return config
    models = []
    for entry in config.models:
        precisions = list(entry.precisions)
        base = next(p for p in entry.precisions if p.reference)
        if base.simulated_errors is not None:
            raise FaultCellsError("--inject-faults needs a model (embedded or an endpoint)")
        for text in texts:
            precisions.append(base.model_copy(update={
                "label": fault_label(base, text), "reference": False, "inject_faults": text}))
        models.append(entry.model_copy(update={"precisions": precisions}))
    return config.model_copy(update={"models": models})


def base_precision_key(precision_key: str) -> str:
    """The natural precision an injected variant's key was made from (itself otherwise)."""
    return precision_key.split(INJECTED_MARK, 1)[0]


def served_together(precisions: list[Precision]) -> list[tuple[Precision, list[Precision]]]:
    """Precisions grouped by the model server they need (an injected variant needs its
    base's), in order: one server per group, never two at once for one model."""
    groups: list[tuple[Precision, list[Precision]]] = []
    for precision in precisions:
        need = _server(precision)
        for server, members in groups:
            if _server(server) == need and need is not None:
                members.append(precision)
                break
        else:
            groups.append((precision, [precision]))
    return groups


def _server(precision: Precision) -> tuple[object, ...] | None:
    if precision.simulated_errors is not None:
        return None  # no server: each simulated precision stands alone
    endpoint = precision.endpoint
    return (precision.embedded, precision.n_ctx,
            (endpoint.base_url, endpoint.model) if endpoint else None)
