"""History hygiene for Anthropic Messages: the check and the repair of `tool_use` blocks
and the `tool_result` blocks that must open the next user message (dialects/history.py
says when each runs). Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from reflexguard.core.history import (
    HistoryReport,
    id_key,
    missing_result_note,
    object_replacement,
)
from reflexguard.core.model import JsonObject
from reflexguard.dialects.history_calls import Body, record, with_note


def messages_needs_work(body: Body) -> bool:
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
    record(fixed, block.get("id"), report, notes)
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
                blocks[at] = {**block, "content": with_note(block.get("content"),
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
