"""History hygiene in each wire format: find the historical calls, check them, repair a copy.

Nothing here does I/O. The HTTP edge reads a request as before, then:

1. a bytes scan for the dialect's call marker (`"tool_calls"`, `"tool_use"`,
   `"function_call"`): a history without calls costs one `bytes.find`;
2. `needs_work`, on the body the reading already parsed: one pass over the conversation,
   one `orjson.loads` per historical call's arguments; a history whose calls are valid and
   answered costs that and nothing more;
3. only when something must change: `repaired` builds a repaired COPY (the parsed body is
   never changed: the `repair_*` functions return new containers along the changed path
   and share the rest) and serialises it, the tools list as the client's own bytes; the
   edge then reads those bytes instead.

Consistency of results with calls (docs/decisions.md, issue 22): a call with no result
before the conversation moves on gets a result saying so (the hosted APIs refuse such a
history with a 400, and a template renders it as a call answered by the next turn); a
result whose id matches no call, and duplicated ids, are passed as sent (vLLM and
llama-server render both; a hosted upstream's own 400 reaches the agent in its format).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from reflexguard.core.history import (
    HistoryReport,
    Replacement,
    id_key,
    missing_result_note,
    object_replacement,
    replacement,
)
from reflexguard.core.model import JsonObject

Body = JsonObject
Repair = Callable[[Body], tuple[Body, HistoryReport]]
MARKERS = {"chat": b'"tool_calls"', "messages": b'"tool_use"', "responses": b'"function_call"'}


def has_calls(raw: bytes, dialect: str, skip: tuple[int, int] | None = None) -> bool:
    """The bytes scan: whether the request may carry a historical call at all. `skip`: the
    span of `raw` a chat request's tools list takes (ChatRequest.tools_span), which holds
    no historical call (`needs_work` reads the conversation, never the tools) and is most
    of an agent's request: scanning 11 KB of schemas for a marker they never hold cost
    more than reading the rest of the request (issue 23)."""
    marker = MARKERS.get(dialect)
    if marker is None:
        return False
    if skip is None:
        return raw.find(marker) >= 0
    # No marker straddles the span's ends: a list begins with [ and ends with ].
    return raw.find(marker, 0, skip[0]) >= 0 or raw.find(marker, skip[1]) >= 0


def _valid_text(arguments: object) -> bool:
    """Whether `arguments` is the text of a JSON object (core/history.py's test, inlined:
    this runs once per historical call on every request that has any)."""
    if type(arguments) is not str or arguments.lstrip()[:1] != "{":
        return False  # not an object's text, decided without building a decode error
    try:
        return type(orjson.loads(arguments)) is dict
    except orjson.JSONDecodeError:
        return False


def _chat_needs_work(body: Body) -> bool:
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
            if not isinstance(function, dict) or not _valid_text(function.get("arguments")):
                return True
            waiting.add(id_key(call.get("id")))
    return False


def _messages_needs_work(body: Body) -> bool:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    waiting: set[object] = set()
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if waiting:  # this message must open with a result for each call just before it
            if not isinstance(content, list):
                return True
            waiting -= {id_key(b.get("tool_use_id")) for b in content
                        if isinstance(b, dict) and b.get("type") == "tool_result"}
            if waiting:
                return True
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                if not isinstance(block.get("input"), dict):
                    return True
                waiting.add(id_key(block.get("id")))
    return False


def _responses_needs_work(body: Body) -> bool:
    items = body.get("input")
    if not isinstance(items, list):
        return False
    waiting: set[object] = set()
    for item in items:
        if not isinstance(item, dict):
            return True
        kind = item.get("type", "message")
        if kind == "function_call":
            if not _valid_text(item.get("arguments")):
                return True
            waiting.add(id_key(item.get("call_id")))
        elif kind == "function_call_output":
            waiting.discard(id_key(item.get("call_id")))
        elif kind == "message" and waiting:
            return True
    return False


CHECKS: dict[str, Callable[[Body], bool]] = {
    "chat": _chat_needs_work, "messages": _messages_needs_work,
    "responses": _responses_needs_work}


def needs_work(body: Body, dialect: str) -> bool:
    """The cheap check, on a body already parsed for reading: whether a historical call may
    need repair. A pass over the conversation with one `orjson.loads` per call's arguments;
    never a false "no" (tests/core/test_history.py holds it to the repair)."""
    check = CHECKS.get(dialect)
    return check is not None and check(body)


# -- pairing results with calls ---------------------------------------------------------------

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


def _with_note(content: object, note: str, part_type: str = "text") -> object:
    """A result's content with `note` after it: last, so a result that starts "Error:"
    still reads as a failure to an error budget (reflexguard/core/budget.py)."""
    if isinstance(content, str):
        return f"{content}\n\n{note}" if content else note
    if isinstance(content, list):
        return [*content, {"type": part_type, "text": note}]
    return note


# -- Chat Completions ----------------------------------------------------------------------

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
                message = {**message, "content": _with_note(message.get("content"),
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
    if _valid_text(arguments) or not report.room():
        return call
    fixed = replacement(arguments, report.allowance)
    if fixed is None:
        return call
    _record(fixed, call.get("id"), report, notes)
    return {**call, "function": {**fields, "arguments": fixed.arguments}}


def _record(fixed: Replacement, call_id: object, report: HistoryReport,
            notes: dict[object, list[str]]) -> None:
    report.add(fixed.kind)
    if fixed.note is not None:
        notes.setdefault(id_key(call_id), []).append(fixed.note)


# -- Anthropic Messages ---------------------------------------------------------------------

def repair_messages(body: Body) -> tuple[Body, HistoryReport]:
    """As repair_chat, for `tool_use.input` (an object) and `tool_result` blocks, which
    must open the user message right after the calls."""
    report = HistoryReport()
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, report
    out: list[Any] = list(messages)
    added: dict[int, JsonObject] = {}  # a user message of results, placed before index
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        notes: dict[object, list[str]] = {}
        blocks = [_tool_use(block, report, notes) for block in content]
        if any(a is not b for a, b in zip(blocks, content, strict=True)):
            out[index] = {**message, "content": blocks}
        ids = [b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not ids or index + 1 >= len(messages):
            continue  # no calls, or they end the conversation: their results may be coming
        following, missing = _answered(out[index + 1], ids, notes, report)
        out[index + 1] = following
        if missing:  # the next message is not the user's: the results get one of their own
            added[index + 1] = {"role": "user", "content": missing}
    if not report.changed:
        return body, report
    if added:
        out = [m for at, message in enumerate(out)
               for m in ((added[at], message) if at in added else (message,))]
    return {**body, "messages": out}, report


def _tool_use(block: object, report: HistoryReport, notes: dict[object, list[str]]) -> object:
    if not isinstance(block, dict) or block.get("type") != "tool_use":
        return block
    if isinstance(block.get("input"), dict) or not report.room():
        return block
    fixed = object_replacement(block.get("input"), report.allowance)
    if fixed is None:
        return block
    _record(fixed, block.get("id"), report, notes)
    return {**block, "input": fixed.value}


def _answered(following: object, ids: list[object], notes: dict[object, list[str]],
              report: HistoryReport) -> tuple[object, list[JsonObject]]:
    """The message after a tool_use turn with the notes in its results and, when it is the
    user's, a result block first for every call it does not answer; else those blocks,
    for a user message of their own."""
    if not isinstance(following, dict):
        return following, []
    content = following.get("content")
    blocks: list[Any] = list(content) if isinstance(content, list) else (
        [{"type": "text", "text": content}] if isinstance(content, str) and content else [])
    answered = set()
    changed = False
    for at, block in enumerate(blocks):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            answered.add(id_key(block.get("tool_use_id")))
            pending = notes.pop(id_key(block.get("tool_use_id")), None)
            if pending:
                blocks[at] = {**block, "content": _with_note(block.get("content"),
                                                             "\n".join(pending))}
                changed = True
    missing: list[JsonObject] = []
    for call_id in ids:
        if id_key(call_id) not in answered and report.room():
            report.add("missing_result")
            missing.append({"type": "tool_result", "tool_use_id": call_id, "content": "\n".join(
                [missing_result_note(), *notes.pop(id_key(call_id), [])])})
    if following.get("role") != "user":
        return ({**following, "content": blocks} if changed else following), missing
    if not missing and not changed:
        return following, []
    return {**following, "content": [*missing, *blocks]}, []


# -- OpenAI Responses -----------------------------------------------------------------------

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
            fixed = None if _valid_text(arguments) or not report.room() else replacement(
                arguments, report.allowance)
            if fixed is not None:
                _record(fixed, item.get("call_id"), report, notes)
                item = {**item, "arguments": fixed.arguments}
        elif isinstance(item, dict) and item.get("type") == "function_call_output":
            pending = notes.pop(id_key(item.get("call_id")), None)
            if pending:
                item = {**item, "output": _with_note(item.get("output"), "\n".join(pending),
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


REPAIRS: dict[str, Repair] = {"chat": repair_chat, "messages": repair_messages,
                              "responses": repair_responses}


def clean_history(raw: bytes, dialect: str) -> tuple[bytes, HistoryReport]:
    """The bytes to forward for a request in `dialect`, and what was repaired: `raw`
    itself unless a historical call needed repair. A body that is not a JSON object is
    returned as it is, for the request's reading to refuse in the dialect's words. (The
    HTTP edge uses `repaired` on the body it has already parsed, which saves a parse.)"""
    if not has_calls(raw, dialect):
        return raw, HistoryReport()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw, HistoryReport()
    if not isinstance(body, dict):
        return raw, HistoryReport()
    fixed = repaired(body, dialect)
    if fixed is None:
        return raw, HistoryReport()
    return fixed[0], fixed[2]


def repaired(body: Body, dialect: str, tools_raw: bytes | None = None,
             ) -> tuple[bytes, Body, HistoryReport] | None:
    """(the bytes of `body` with its history repaired, that body, what was repaired), or
    None when nothing needs it. `tools_raw`: the tools list's bytes as the client sent
    them, where `body` holds null in its place (a chat request read by a split)."""
    if not needs_work(body, dialect):
        return None
    fixed, report = REPAIRS[dialect](body)
    if not report.changed:
        return None
    written = fixed
    if tools_raw is not None and "tools" in fixed:
        written = {**fixed, "tools": orjson.Fragment(tools_raw)}  # in its place, as sent
    try:
        return orjson.dumps(written), fixed, report
    except (TypeError, RecursionError):  # deeper than orjson writes: forwarded as sent
        return None
