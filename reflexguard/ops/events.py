"""The events file's records: written by telemetry, read by the bench, defined once here.

Nothing here does I/O. The records are TypedDicts, so writing one costs nothing more
than the dict it is, while mypy checks every key on both sides and `read_event`
validates a line against the same definition.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field, TypeAdapter

# pydantic validates TypedDicts only from typing_extensions before Python 3.12.
from typing_extensions import TypedDict

from reflexguard.core.attempts import AttemptKind, Outcome
from reflexguard.core.loops import LoopAction

REPAIRED: frozenset[Outcome] = frozenset(
    {"fixed_by_fix", "fixed_by_reask", "fixed_by_constrained"})


class CallEvent(TypedDict):
    channel: str
    name: str | None
    detail: str
    # With `margins: on` (docs/screen.md): logit margins in nats, None where unknown;
    # thin_margin only when name_margin < margin_threshold.
    name_margin: NotRequired[float | None]
    call_margin: NotRequired[float | None]
    thin_margin: NotRequired[bool]
    # With `inject_faults` (testing only, docs/bench.md): the channel of the fault put on
    # this call and what was done. A call without it is as the model wrote it (natural).
    injected: NotRequired[str]
    injected_detail: NotRequired[str]


class AttemptEvent(TypedDict):
    event: Literal["attempt"]
    ts: float
    request_id: str
    session: str | None
    model: str
    attempt: int
    kind: AttemptKind
    calls: list[CallEvent]
    fixes: list[str]
    toolset: str
    latency_ms: float
    stream: bool
    # chat, messages or responses; absent from files written before dialects existed
    dialect: NotRequired[str]


class OutcomeEvent(TypedDict):
    event: Literal["outcome"]
    ts: float
    outcome: Outcome
    request_id: str
    session: str | None
    dialect: NotRequired[str]  # as on AttemptEvent
    # The attempt the agent got: its number (1: the first answer), "+fix" when the
    # deterministic fixes rewrote it, "+withheld" when its calls were held back.
    chosen_attempt: NotRequired[str]


class FallbackEvent(TypedDict, total=False):
    event: Literal["fallback"]
    ts: float
    kind: str
    request_id: str
    session: str | None


class HistoryEvent(TypedDict):
    """Historical calls repaired in a request before it was forwarded (channel
    history_repaired, docs/channels.md): how many of each kind."""

    event: Literal["history_repaired"]
    ts: float
    dialect: str
    kinds: dict[str, int]


class RepeatedCallEvent(TypedDict):
    """A reply whose calls repeat calls the conversation already made with one result
    (channel repeated_call, core/loops.py), and what the loop guard did about it."""

    event: Literal["repeated_call"]
    ts: float
    request_id: str
    session: str | None
    dialect: str
    action: LoopAction  # observed, replaced (the re-ask's answer went out) or kept
    reason: str | None  # why the model's own answer was kept
    calls: list[RepeatedCallRecord]


class RepeatedCallRecord(TypedDict):
    name: str
    times: int  # earlier identical calls with the same result


Event = Annotated[AttemptEvent | OutcomeEvent | FallbackEvent | HistoryEvent | RepeatedCallEvent,
                  Field(discriminator="event")]
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


def read_event(line: bytes | str) -> Event:
    """One line of the events file, validated; raises pydantic's ValidationError."""
    return _EVENT.validate_json(line)
