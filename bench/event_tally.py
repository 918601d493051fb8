"""What reflexguard's events file says about one episode or case: the channels of first
answers, the wrong tool names, the outcomes and the extra upstream calls. One reading,
shared by the tau2 and BFCL benches. Nothing here does I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from reflexguard.core.channels import Channel
from reflexguard.ops.events import REPAIRED, Event


@dataclass
class EventTally:
    requests: int = 0  # first attempts: one per guarded request
    first: Counter[str] = field(default_factory=Counter)  # first answers' channels
    names: Counter[str] = field(default_factory=Counter)  # unknown tool names, first answers
    outcomes: Counter[str] = field(default_factory=Counter)
    extra: int = 0  # re-asks and constrained attempts
    attempted: int = 0  # outcomes other than "observed"
    succeeded: int = 0  # of those, repaired
    repeated: Counter[str] = field(default_factory=Counter)  # loop guard: action -> calls


def tally(events: Iterable[Event]) -> EventTally:
    out = EventTally()
    for event in events:
        if event["event"] == "attempt":
            if event["kind"] == "initial":
                out.requests += 1
                for call in event["calls"]:
                    out.first[call["channel"]] += 1
                    if call["channel"] == Channel.UNKNOWN_TOOL and call["name"]:
                        out.names[call["name"]] += 1
            elif event["kind"] in ("reask", "constrained", "loop"):
                out.extra += 1
        elif event["event"] == "outcome":
            out.outcomes[event["outcome"]] += 1
            if event["outcome"] != "observed":
                out.attempted += 1
                out.succeeded += event["outcome"] in REPAIRED
        elif event["event"] == "repeated_call":
            out.repeated[event["action"]] += len(event["calls"])
    return out
