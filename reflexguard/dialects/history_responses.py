"""History hygiene for OpenAI Responses: the check and the repair of `function_call` input
items and their `function_call_output` items (dialects/history.py says when each runs).
Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from reflexguard.core.history import HistoryReport, id_key, missing_result_note, replacement
from reflexguard.core.model import JsonObject
from reflexguard.dialects.history_calls import Body, record, valid_text, with_note


def responses_needs_work(body: Body) -> bool:
    items = body.get("input")
    if not isinstance(items, list):
        return False
    waiting: set[object] = set()
    for item in items:
        if not isinstance(item, dict):
            return True
        kind = item.get("type", "message")
        if kind == "function_call":
            if not valid_text(item.get("arguments")):
                return True
            waiting.add(id_key(item.get("call_id")))
        elif kind == "function_call_output":
            waiting.discard(id_key(item.get("call_id")))
        elif kind == "message" and waiting:
            return True
    return False


def _responses_dangling(items: list[tuple[object, object]]) -> list[int]:
    """Positions of function_call items whose call_id has no output after them, when a
    message item follows them (the conversation moved on). One pass from the end: linear
    in the items, however many calls a hostile body holds."""
    dangling = []
    answered: set[object] = set()  # call ids with an output further on
    message_later = False
    for at in range(len(items) - 1, -1, -1):
        kind, call_id = items[at]
        if kind == "function_call_output":
            answered.add(id_key(call_id))
        elif kind in ("message", None):
            message_later = True
        elif kind == "function_call" and message_later and id_key(call_id) not in answered:
            dangling.append(at)
    dangling.reverse()
    return dangling


def repair_responses(body: Body) -> tuple[Body, HistoryReport]:
    """As repair_chat, for `function_call` input items and `function_call_output` items."""
    report = HistoryReport()
    items = body.get("input")
    if not isinstance(items, list):
        return body, report
    notes: dict[object, list[str]] = {}
    out: list[Any] = []
    for at, item in enumerate(items):
        if report.left_as_sent:
            out.extend(items[at:])  # past MAX_REPAIRED_CALLS: the rest as sent
            break
        if isinstance(item, dict) and item.get("type") == "function_call":
            arguments = item.get("arguments")
            fixed = None if valid_text(arguments) or not report.room() else replacement(
                arguments, report.allowance)
            if fixed is not None:
                record(fixed, item.get("call_id"), report, notes)
                item = {**item, "arguments": fixed.arguments}
        elif isinstance(item, dict) and item.get("type") == "function_call_output":
            pending = notes.pop(id_key(item.get("call_id")), None)
            if pending:
                item = {**item, "output": with_note(item.get("output"), "\n".join(pending),
                                                     "input_text")}
        out.append(item)
    pairs = [(i.get("type", "message"), i.get("call_id")) if isinstance(i, dict)
             else ("message", None) for i in out]
    results: dict[int, JsonObject] = {}  # position -> the result placed after it
    for at in reversed(_responses_dangling(pairs)):  # the latest first, while room lasts
        if not report.room():
            break
        call_id = pairs[at][1]
        report.add("missing_result")
        text = "\n".join([missing_result_note(), *notes.pop(id_key(call_id), [])])
        results[at] = {"type": "function_call_output", "call_id": call_id, "output": text}
    if not report.changed:
        return body, report
    if results:  # one pass: an insert per dangling call was quadratic in the items
        out = [x for at, item in enumerate(out)
               for x in ((item, results[at]) if at in results else (item,))]
    return {**body, "input": out}, report
