"""Injected faults versus natural errors, as reflexguard's events file tells them apart.

Nothing here does I/O. With `inject_faults` on (bench `--inject-faults`), reflexguard
marks every call it damaged (`injected` on the call's event, docs/bench.md); every other
invalid call is the model's own, natural, error. One reading per episode or case, shared
by the tau2 and BFCL benches, so each record says which of its errors were injected.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from reflexguard.core.channels import Channel
from reflexguard.ops.events import REPAIRED, Event

# What the agent got when the first answer is what it got (choice.chosen_attempt).
FIRST_CHOSEN = ("1",)


class InjectedTally(BaseModel):
    """One episode's (or case's) injected faults beside its natural first-answer errors."""

    # Faults put on first answers, and on re-asks' answers (reasks=on), by channel.
    first: dict[str, int] = Field(default_factory=dict)
    reasks: dict[str, int] = Field(default_factory=dict)
    # First-answer calls the model got wrong by itself (not injected), by channel.
    natural_first: dict[str, int] = Field(default_factory=dict)
    # Guarded requests whose first answer carried an injected fault; of those, how many
    # the ladder repaired, and how many reached the agent as damaged (no repair, or a
    # repair that gave up and returned the first answer).
    requests: int = 0
    repaired: int = 0
    passed_on: int = 0
    # The wrong names injected into first answers that reached the agent (to tell an
    # environment's "tool not found" for them from a natural hallucination).
    passed_on_names: dict[str, int] = Field(default_factory=dict)
    # Tool names of injected schema faults that reached the agent (argument errors).
    passed_on_schema: dict[str, int] = Field(default_factory=dict)
    # Injected faults that reached the agent, by channel (a malformed one crashes tau2).
    passed_on_channels: dict[str, int] = Field(default_factory=dict)

    @property
    def injected(self) -> int:
        return sum(self.first.values()) + sum(self.reasks.values())


def injected_tally(events: Iterable[Event]) -> InjectedTally:
    first: Counter[str] = Counter()
    reasks: Counter[str] = Counter()
    natural: Counter[str] = Counter()
    # request id -> the injected first-answer calls: (channel, name as sent)
    hit: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    outcomes: dict[str, tuple[str, str | None]] = {}
    for event in events:
        if event["event"] == "attempt":
            for call in event["calls"]:
                mark = call.get("injected")
                if event["kind"] == "initial":
                    if mark:
                        first[mark] += 1
                        hit[event["request_id"]].append((mark, call["name"]))
                    elif call["channel"] != Channel.OK:
                        natural[call["channel"]] += 1
                elif mark:
                    reasks[mark] += 1
        elif event["event"] == "outcome":
            outcomes[event["request_id"]] = (event["outcome"], event.get("chosen_attempt"))
    repaired = passed = 0
    names: Counter[str] = Counter()
    schema: Counter[str] = Counter()
    channels: Counter[str] = Counter()
    for request, calls in hit.items():
        outcome, chosen = outcomes.get(request, ("observed", "1"))
        if outcome in REPAIRED:
            repaired += 1
            continue
        if outcome == "observed" or chosen in FIRST_CHOSEN:
            passed += 1
            for channel, name in calls:
                channels[channel] += 1
                if channel == Channel.UNKNOWN_TOOL and name:
                    names[name] += 1
                elif channel == Channel.SCHEMA_VIOLATION and name:
                    schema[name] += 1
    return InjectedTally(first=dict(first), reasks=dict(reasks), natural_first=dict(natural),
                         requests=len(hit), repaired=repaired, passed_on=passed,
                         passed_on_names=dict(names), passed_on_schema=dict(schema),
                         passed_on_channels=dict(channels))


def is_injected_label(precision: str) -> bool:
    """Whether a cell's precision label is an injected-fault variant (bench/tau2/fault_cells.py)."""
    return "+inject:" in precision.split()[0]


def mark_injected(calls: list[Any], tally: InjectedTally) -> list[Any]:
    """The environment's failed calls that an injected fault explains, marked `injected`:
    an unknown name that was injected and reached the agent, or an argument error of a
    tool whose injected schema fault reached it (each injected fault explains one)."""
    names = Counter(tally.passed_on_names)
    schema = Counter(tally.passed_on_schema)
    out = []
    for call in calls:
        if call.error and call.channel == "unknown_tool" and names[call.name] > 0:
            names[call.name] -= 1
            call = call.model_copy(update={"injected": True})
        elif call.error and call.channel == "argument_error" and schema[call.name] > 0:
            schema[call.name] -= 1
            call = call.model_copy(update={"injected": True})
        out.append(call)
    return out
