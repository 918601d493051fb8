"""History hygiene in each wire format: find the historical calls, check them, repair a copy.

Nothing here does I/O. `clean_history` is what the HTTP edge calls with the client's bytes:

1. a bytes scan for the dialect's call marker (`"tool_calls"`, `"tool_use"`,
   `"function_call"`): a history without calls costs one `bytes.find`;
2. a typed msgspec view that decodes only the calls, their arguments and the ids that
   pair results with calls (everything else, the tools list included, is skipped, not
   built): a history whose calls are all valid costs that and one `orjson.loads` per
   argument string;
3. only when something must change: the body parsed, a repaired COPY built (the parsed
   body itself is never changed: `repair_*` return new containers along the changed path
   and share the rest) and serialised.

Consistency of results with calls (docs/decisions.md, issue 22): a call with no result
before the conversation moves on gets a result saying so (the hosted APIs refuse such a
history with a 400, and a template renders it as a call answered by the next turn); a
result whose id matches no call, and duplicated ids, are passed as sent (vLLM and
llama-server render both; a hosted upstream's own 400 reaches the agent in its format).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import orjson

from reflexguard.core.history import (
    HistoryReport,
    Replacement,
    missing_result_note,
    object_replacement,
    replacement,
)
from reflexguard.core.model import JsonObject

Body = JsonObject
Repair = Callable[[Body], tuple[Body, HistoryReport]]
MARKERS = {"chat": b'"tool_calls"', "messages": b'"tool_use"', "responses": b'"function_call"'}


# -- the typed views: only what the check reads ----------------------------------------------

class _Function(msgspec.Struct):
    arguments: object = None


class _ChatCall(msgspec.Struct):
    id: object = None
    function: _Function | None = None


class _ChatMessage(msgspec.Struct):
    role: object = None
    tool_calls: list[_ChatCall] | None = None
    tool_call_id: object = None


class _ChatView(msgspec.Struct):
    messages: list[_ChatMessage] = []


class _Block(msgspec.Struct):
    type: object = None
    id: object = None
    input: msgspec.Raw = msgspec.Raw(b"")
    tool_use_id: object = None


class _AnthropicMessage(msgspec.Struct):
    content: str | list[_Block] | None = None


class _MessagesView(msgspec.Struct):
    messages: list[_AnthropicMessage] = []


class _Item(msgspec.Struct):
    type: object = None
    call_id: object = None
    arguments: object = None


class _ResponsesView(msgspec.Struct):
    input: str | list[_Item] | None = None


_CHAT = msgspec.json.Decoder(_ChatView)
_MESSAGES = msgspec.json.Decoder(_MessagesView)
_RESPONSES = msgspec.json.Decoder(_ResponsesView)


def _valid_text(arguments: object) -> bool:
    return isinstance(arguments, str) and replacement(arguments) is None


def _chat_needs_work(raw: bytes) -> bool:
    messages = _CHAT.decode(raw).messages
    for index, message in enumerate(messages):
        calls = message.tool_calls
        if not calls:
            continue
        if any(c.function is None or not _valid_text(c.function.arguments) for c in calls):
            return True
        if _chat_dangling(index, [c.id for c in calls],
                          [(m.role, m.tool_call_id) for m in messages])[0]:
            return True
    return False


def _messages_needs_work(raw: bytes) -> bool:
    messages = _MESSAGES.decode(raw).messages
    for index, message in enumerate(messages):
        content = message.content
        blocks = [b for b in content if b.type == "tool_use"] if isinstance(content, list) else []
        if not blocks:
            continue
        if any(not bytes(b.input).startswith(b"{") for b in blocks):
            return True
        if index + 1 < len(messages):
            following = messages[index + 1].content
            answered = {b.tool_use_id for b in following
                        if b.type == "tool_result"} if isinstance(following, list) else set()
            if any(b.id not in answered for b in blocks):
                return True
    return False


def _responses_needs_work(raw: bytes) -> bool:
    items = _RESPONSES.decode(raw).input
    if not isinstance(items, list):
        return False
    if any(i.type == "function_call" and not _valid_text(i.arguments) for i in items):
        return True
    return bool(_responses_dangling([(i.type or "message", i.call_id) for i in items]))


def needs_work(raw: bytes, dialect: str) -> bool:
    """Whether a request's history may need repair: the cheap check. False for a body
    the views cannot read (the full read then says what is wrong, in its own words)."""
    marker = MARKERS.get(dialect)
    if marker is None or raw.find(marker) < 0:
        return False
    check = {"chat": _chat_needs_work, "messages": _messages_needs_work,
             "responses": _responses_needs_work}[dialect]
    try:
        return check(raw)
    except (msgspec.DecodeError, RecursionError):
        return False  # not JSON: the request's reading refuses it in the dialect's words
    except msgspec.ValidationError:
        return True  # a shape the view does not know: the full read decides


# -- pairing results with calls ---------------------------------------------------------------

def _chat_dangling(index: int, call_ids: list[object],
                   roles: list[tuple[object, object]]) -> tuple[list[object], int]:
    """The ids of the calls at `index` with no tool message among those right after it,
    when a message other than a tool result follows (the conversation moved on); and the
    position of that message, where their results belong."""
    answered: set[object] = set()
    at = index + 1
    while at < len(roles) and roles[at][0] == "tool":
        answered.add(roles[at][1])
        at += 1
    if at >= len(roles):
        return [], at  # the calls end the conversation: their results may be coming
    return [i for i in call_ids if i not in answered], at


def _responses_dangling(items: list[tuple[object, object]]) -> list[int]:
    """Positions of function_call items whose call_id has no output after them, when a
    message item follows them (the conversation moved on)."""
    dangling = []
    for at, (kind, call_id) in enumerate(items):
        if kind != "function_call":
            continue
        later = items[at + 1:]
        if any(k == "function_call_output" and c == call_id for k, c in later):
            continue
        if any(k in ("message", None) for k, _ in later):
            dangling.append(at)
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
        for call_id in missing.pop(index, ()):
            report.add("missing_result")
            text = "\n".join([missing_result_note(), *notes.pop(call_id, [])])
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if isinstance(message, dict) and message.get("role") == "tool":
            pending = notes.pop(message.get("tool_call_id"), None)
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
    fixed = replacement(fields.get("arguments"), report.allowance)
    if fixed is None:
        return call
    _record(fixed, call.get("id"), report, notes)
    return {**call, "function": {**fields, "arguments": fixed.arguments}}


def _record(fixed: Replacement, call_id: object, report: HistoryReport,
            notes: dict[object, list[str]]) -> None:
    report.add(fixed.kind)
    if fixed.note is not None:
        notes.setdefault(call_id, []).append(fixed.note)


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
            answered.add(block.get("tool_use_id"))
            pending = notes.pop(block.get("tool_use_id"), None)
            if pending:
                blocks[at] = {**block, "content": _with_note(block.get("content"),
                                                             "\n".join(pending))}
                changed = True
    missing: list[JsonObject] = []
    for call_id in ids:
        if call_id not in answered:
            report.add("missing_result")
            missing.append({"type": "tool_result", "tool_use_id": call_id, "content": "\n".join(
                [missing_result_note(), *notes.pop(call_id, [])])})
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
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call":
            fixed = replacement(item.get("arguments"), report.allowance)
            if fixed is not None:
                _record(fixed, item.get("call_id"), report, notes)
                item = {**item, "arguments": fixed.arguments}
        elif isinstance(item, dict) and item.get("type") == "function_call_output":
            pending = notes.pop(item.get("call_id"), None)
            if pending:
                item = {**item, "output": _with_note(item.get("output"), "\n".join(pending),
                                                     "input_text")}
        out.append(item)
    pairs = [(i.get("type", "message"), i.get("call_id")) if isinstance(i, dict)
             else ("message", None) for i in out]
    for at in reversed(_responses_dangling(pairs)):
        call_id = pairs[at][1]
        report.add("missing_result")
        text = "\n".join([missing_result_note(), *notes.pop(call_id, [])])
        out.insert(at + 1, {"type": "function_call_output", "call_id": call_id,
                            "output": text})
    if not report.changed:
        return body, report
    return {**body, "input": out}, report


REPAIRS: dict[str, Repair] = {"chat": repair_chat, "messages": repair_messages,
                              "responses": repair_responses}


def clean_history(raw: bytes, dialect: str) -> tuple[bytes, HistoryReport]:
    """The bytes to forward for a request in `dialect`, and what was repaired: `raw`
    itself unless a historical call needed repair. A body that is not a JSON object is
    returned as it is, for the request's reading to refuse in the dialect's words."""
    if not needs_work(raw, dialect):
        return raw, HistoryReport()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw, HistoryReport()
    if not isinstance(body, dict):
        return raw, HistoryReport()
    repaired, report = REPAIRS[dialect](body)
    if not report.changed:
        return raw, report
    try:
        return orjson.dumps(repaired), report
    except (TypeError, RecursionError):  # deeper than orjson writes: the read refuses it
        return raw, HistoryReport()
