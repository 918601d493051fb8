"""History hygiene: the tool calls an agent replays, made safe to forward. Nothing here does I/O.

Model servers parse the arguments of every historical call while rendering the chat
template (vLLM answers 400 before its PR #48922, llama-server 500), so one broken call
fails every later turn of its conversation. This module decides, for one historical
call's arguments, whether they are a JSON object and, if not, what the forwarded copy
carries instead (docs/channels.md, `history_repaired`); the dialect readers in
`reflexguard.dialects.history` find the calls in each wire format and apply it to a copy.

The replacement, and why:
- an object sent where a string belongs: the same object, serialised (nothing failed:
  the client re-serialised it, deer-flow #4445);
- an empty string: `{}` (a call without arguments: what the model meant);
- broken JSON that json-repair turns into an object: that object, and a note in the
  call's result saying the arguments were repaired (what the model wrote is kept as far
  as it can be read);
- anything else (unrecoverable, not an object, too long to repair within the bound):
  `{}`, and a note quoting the start of what was there, so the model still knows the call
  failed and why, rather than seeing a call that seems to have had no arguments.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

import json_repair
import orjson

from reflexguard.core.limits import clip

RepairKind = Literal[
    "object_not_string",  # arguments given as a JSON object instead of a string
    "empty_arguments",  # "" (or only whitespace)
    "broken_json_repaired",  # not JSON; json-repair recovered an object
    "broken_json_emptied",  # not JSON and not recoverable (or too long): `{}`
    "not_an_object",  # JSON, but an array, a string, a number or null: `{}`
    "missing_result",  # a call with no result before the conversation moved on
]
REPAIR_KINDS: tuple[RepairKind, ...] = (
    "object_not_string", "empty_arguments", "broken_json_repaired", "broken_json_emptied",
    "not_an_object", "missing_result")
# json-repair is pure Python, about 1.7 ms per KiB here (measured on an unterminated string,
# its slowest case): arguments longer than MAX_REPAIR_CHARS, or beyond MAX_REPAIR_TOTAL in
# one request, are not handed to it; they become `{}` with a note. So one request spends
# at most ~30 ms of the event loop in it.
MAX_REPAIR_CHARS = 8 * 1024
MAX_REPAIR_TOTAL = 16 * 1024
MAX_REPAIR_CALLS = 64  # json-repair calls per request: its fixed cost is ~50 us a call
# Historical calls repaired per request; further broken ones are forwarded as sent (what
# the server would have had without reflexguard) and counted. 20,000 broken calls in one
# body took 2.4 s to repair before this bound; 512 take a few milliseconds.
MAX_REPAIRED_CALLS = 512
QUOTED_CHARS = 200  # how much of the broken arguments the note quotes
NOTE_PREFIX = "[reflexguard]"


@dataclass(frozen=True)
class Replacement:
    """What one historical call's arguments become in the forwarded copy."""

    arguments: str  # a JSON object, serialised
    value: dict[str, object]  # the same object (Messages carries `input` as an object)
    kind: RepairKind
    note: str | None  # for the call's result, where the model reads it; None: nothing failed


def is_object_text(arguments: str) -> bool:
    """Whether `arguments` is the text of a JSON object: the one thing servers accept."""
    try:
        return isinstance(orjson.loads(arguments), dict)
    except orjson.JSONDecodeError:
        return False


def replacement(arguments: object, allowance: RepairAllowance | None = None,
                ) -> Replacement | None:
    """None when `arguments` (a call's `arguments` field as sent, or a Messages `input`
    given as text) is already a JSON object string; else what the forwarded copy carries.
    `allowance`: the request's json-repair bound (none given: one call's)."""
    if isinstance(arguments, dict):
        return Replacement(_dumps(arguments), arguments, "object_not_string", None)
    if not isinstance(arguments, str):
        return _emptied("not_an_object", arguments)
    if not arguments.strip():
        return Replacement("{}", {}, "empty_arguments", None)
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return _repaired(arguments, allowance or RepairAllowance())
    if isinstance(value, dict):
        return None
    if isinstance(value, str) and len(value) <= MAX_REPAIR_CHARS:  # encoded twice
        # Only an object's text is decoded here; broken JSON inside a string is not
        # repaired (that path once bypassed the request's json-repair allowance).
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict):
            return Replacement(value, decoded, "not_an_object",
                               _note("were a JSON object encoded twice; shown decoded"))
    return _emptied("not_an_object", arguments)


def object_replacement(value: object, allowance: RepairAllowance | None = None,
                       ) -> Replacement | None:
    """For a Messages `tool_use.input`, which must be an object: None when it is one."""
    if isinstance(value, dict):
        return None
    if isinstance(value, str):
        text = replacement(value, allowance)
        if text is None:
            return Replacement(value, orjson.loads(value), "not_an_object",
                               _note("were sent as text, not an object; shown parsed"))
        if text.kind == "empty_arguments":
            return text
        return Replacement(text.arguments, text.value, text.kind,
                           text.note or _note("were sent as text, not an object"))
    return _emptied("not_an_object", value)


def missing_result_note() -> str:
    """The result written for a call that has none before the conversation moved on. It
    does not start with "Error:", so an error budget read from the conversation does not
    count a failure the environment never reported."""
    return (f"{NOTE_PREFIX} no result was recorded for this call before the conversation "
            "continued; it may not have run.")


def _repaired(arguments: str, allowance: RepairAllowance) -> Replacement:
    if allowance.spend(len(arguments)):
        try:
            value = json_repair.loads(arguments)
        except Exception:  # json-repair is best effort: a failure means "no repair", {} below
            value = None
        if isinstance(value, dict) and value:
            return Replacement(_dumps(value), value, "broken_json_repaired",
                               _note(f"were not valid JSON ({_quoted(arguments)}); "
                                     "shown as repaired, which may not be what was meant"))
    return _emptied("broken_json_emptied", arguments)


def _emptied(kind: RepairKind, was: object) -> Replacement:
    what = "not valid JSON" if kind == "broken_json_emptied" else "not a JSON object"
    return Replacement("{}", {}, kind,
                       _note(f"were {what} ({_quoted(was)}) and are shown as {{}}; "
                             "the call did not run as written"))


def _quoted(was: object) -> str:
    text = was if isinstance(was, str) else _dumps(was)
    return f"began: {clip(text, QUOTED_CHARS)!r}"


def _note(what: str) -> str:
    return f"{NOTE_PREFIX} this call's arguments {what}."


def _dumps(value: object) -> str:
    try:
        return orjson.dumps(value).decode()
    except (TypeError, RecursionError):
        return "{}"


@dataclass
class RepairAllowance:
    """The json-repair work one request may still spend (characters handed to it)."""

    left: int = MAX_REPAIR_TOTAL
    calls: int = MAX_REPAIR_CALLS

    def spend(self, chars: int) -> bool:
        if chars > MAX_REPAIR_CHARS or chars > self.left or self.calls <= 0:
            return False
        self.left -= chars
        self.calls -= 1
        return True


@dataclass
class HistoryReport:
    """What the hygiene changed in one request, by kind."""

    kinds: Counter[str] = field(default_factory=Counter)  # RepairKind -> how many
    allowance: RepairAllowance = field(default_factory=RepairAllowance)
    left_as_sent: int = 0  # broken calls past MAX_REPAIRED_CALLS, forwarded unrepaired

    def add(self, kind: RepairKind) -> None:
        self.kinds[kind] += 1

    def room(self) -> bool:
        """Whether one more call may be repaired in this request (else it is counted)."""
        if sum(self.kinds.values()) < MAX_REPAIRED_CALLS:
            return True
        self.left_as_sent += 1
        return False

    @property
    def changed(self) -> bool:
        return bool(self.kinds)


def id_key(value: object) -> object:
    """A historical call id as a set member and dict key. A client may send any JSON as an
    id (an array, an object: unhashable); such a history is forwarded as sent, for the
    server to judge (issue 30), and paired by the id's JSON text, so an id matches only an
    equal id: `1` never matches `true` or `"1"`."""
    if type(value) is str:
        return value
    try:
        return b"json:" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # nested past orjson's depth: unique, so it pairs with nothing
        return ("unwritable", id(value))
