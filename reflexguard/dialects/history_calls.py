"""What the history walkers of every dialect share: the test of a call's arguments, a note
added to a result, a replacement recorded. Nothing here does I/O.
"""

from __future__ import annotations

import orjson

from reflexguard.core.history import HistoryReport, Replacement, id_key
from reflexguard.core.model import JsonObject

Body = JsonObject


def valid_text(arguments: object) -> bool:
    """Whether `arguments` is the text of a JSON object (core/history.py's test, inlined:
    this runs once per historical call on every request that has any)."""
    if type(arguments) is not str or arguments.lstrip()[:1] != "{":
        return False  # not an object's text, decided without building a decode error
    try:
        return type(orjson.loads(arguments)) is dict
    except orjson.JSONDecodeError:
        return False


def with_note(content: object, note: str, part_type: str = "text") -> object:
    """A result's content with `note` after it: last, so a result that starts "Error:"
    still reads as a failure to an error budget (reflexguard/core/budget.py)."""
    if isinstance(content, str):
        return f"{content}\n\n{note}" if content else note
    if isinstance(content, list):
        return [*content, {"type": part_type, "text": note}]
    return note


def record(fixed: Replacement, call_id: object, report: HistoryReport,
           notes: dict[object, list[str]]) -> None:
    report.add(fixed.kind)
    if fixed.note is not None:
        notes.setdefault(id_key(call_id), []).append(fixed.note)
