"""History hygiene for Chat Completions: the check and the repair of `tool_calls` and
their `tool` results (dialects/history.py says when each runs). Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from reflexguard.core.history import HistoryReport, id_key, missing_result_note, replacement
from reflexguard.dialects.history_calls import Body, record, valid_text, with_note


def chat_needs_work(body: Body) -> bool:
    """One pass over the parsed messages: a call whose arguments are not a JSON object
    string, or a call turn left unanswered when another message follows its results."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    waiting: set[object] = set()  # the latest call turn's ids without a result yet
    for message in messages:
        if not isinstance(message, dict):
            return True  # the repair's defensive reading decides
        role = message.get("role")
        if role == "tool":
            waiting.discard(id_key(message.get("tool_call_id")))
            continue
        if waiting:
            return True
        calls = message.get("tool_calls")
        if not calls:
            continue
        if not isinstance(calls, list):
            return True
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not valid_text(function.get("arguments")):
                return True
            waiting.add(id_key(call.get("id")))
    return False


def _chat_dangling(index: int, call_ids: list[object],
                   roles: list[tuple[object, object]]) -> tuple[list[object], int]:
    """The ids of the calls at `index` with no tool message among those right after it,
    when a message other than a tool result follows (the conversation moved on); and the
    position of that message, where their results belong."""
    answered: set[object] = set()
    at = index + 1
    while at < len(roles) and roles[at][0] == "tool":
        answered.add(id_key(roles[at][1]))
        at += 1
    if at >= len(roles):
        return [], at  # the calls end the conversation: their results may be coming
    return [i for i in call_ids if id_key(i) not in answered], at


def repair_chat(body: Body) -> tuple[Body, HistoryReport]:
    """The body with every historical call's arguments a JSON object string and every
    call answered; `body` itself is returned when nothing changes, and never mutated."""
    report = HistoryReport()
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, report
    out: list[Any] = []
    notes: dict[object, list[str]] = {}  # call id -> notes for its result
    missing: dict[int, list[object]] = {}  # position -> ids whose results go before it
    roles = [(m.get("role"), m.get("tool_call_id")) if isinstance(m, dict) else (None, None)
             for m in messages]
    for index, message in enumerate(messages):
        if report.left_as_sent:
            out.extend(messages[index:])  # past MAX_REPAIRED_CALLS: the rest as sent
            break
        for call_id in missing.pop(index, ()):
            if not report.room():
                break
            report.add("missing_result")
            text = "\n".join([missing_result_note(), *notes.pop(id_key(call_id), [])])
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if isinstance(message, dict) and message.get("role") == "tool":
            pending = notes.pop(id_key(message.get("tool_call_id")), None)
            if pending:
                message = {**message, "content": with_note(message.get("content"),
                                                            "\n".join(pending))}
        out.append(message)
        if not isinstance(calls, list) or not calls:
            continue
        new_calls = [_chat_call(call, report, notes) for call in calls]
        if any(a is not b for a, b in zip(new_calls, calls, strict=True)):
            out[-1] = {**message, "tool_calls": new_calls}
        ids = [c.get("id") if isinstance(c, dict) else None for c in calls]
        unanswered, at = _chat_dangling(index, ids, roles)
        if unanswered:
            missing.setdefault(at, []).extend(unanswered)
    if not report.changed:
        return body, report
    return {**body, "messages": out}, report


def _chat_call(call: object, report: HistoryReport, notes: dict[object, list[str]]) -> object:
    if not isinstance(call, dict):
        return call
    function = call.get("function")
    fields = function if isinstance(function, dict) else {}
    arguments = fields.get("arguments")
    if valid_text(arguments) or not report.room():
        return call
    fixed = replacement(arguments, report.allowance)
    if fixed is None:
        return call
    record(fixed, call.get("id"), report, notes)
    return {**call, "function": {**fields, "arguments": fixed.arguments}}
