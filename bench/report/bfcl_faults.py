"""The BFCL report's injected-faults section, from the summary alone (none: nothing)."""

from __future__ import annotations

from typing import Any

CHANNELS = ("unknown_tool", "malformed_args", "schema_violation", "any")
NOTE = ("> **INJECTED** cells (`+inject:SPEC`) ran with reflexguard damaging a seeded share "
        "of the model's tool calls on purpose (`--inject-faults`, simulated damage; "
        "docs/bench.md). The damage is the same on both arms' first answers; every re-ask "
        "went to the real model, and BFCL's own checker scored the answers. **natural** = "
        "faults the model made by itself.")


def _r(entry: dict[str, Any] | None) -> str:
    if not entry or entry["rate"] is None:
        return "–"
    return (f"{entry['successes']}/{entry['n']} {100 * entry['rate']:.0f}% "
            f"[{100 * entry['low']:.0f}, {100 * entry['high']:.0f}]")


def bfcl_fault_lines(summary: dict[str, Any]) -> list[str]:
    faults = summary.get("faults") or {}
    if not faults:
        return []
    lines = ["## INJECTED faults: what repair turns into a correct answer", "", NOTE, "",
             "Share of cases whose on-arm answer BFCL accepts, among cases with an INJECTED "
             "fault on a first answer (by channel), and among cases whose first answer had "
             "a natural fault (in the injected cell, and in its natural cell). Wilson 95%.",
             "", "| cell | category | pairs | INJECTED cases | "
             + " | ".join(f"INJECTED {c} → correct" for c in CHANNELS)
             + " | natural → correct (same cell) | natural → correct (natural cell) | "
               "accuracy off → on | fixed | broken (INJECTED / not) |",
             "|---|---|---|---|" + "---|" * len(CHANNELS) + "---|---|---|---|---|"]
    for cell, entry in sorted(faults.items()):
        for category, row in entry["categories"].items():
            inj, nat = row["injected_cell"], row["natural_cell"]
            by = inj["injected_repaired_correct"]
            lines.append(
                f"| {cell.split('@', 1)[-1]} | {category} | {inj['pairs']} | "
                f"{inj['injected_cases']} | " + " | ".join(_r(by.get(c)) for c in CHANNELS)
                + f" | {_r(inj['natural_repaired_correct'])} | "
                f"{_r(nat['natural_repaired_correct']) if nat else '–'} | "
                f"{_r(inj['off_correct'])} → {_r(inj['on_correct'])} | {inj['fixed']} | "
                f"{inj['broken_with_injected_fault']} / {inj['broken_without']} |")
    return [*lines, ""]
