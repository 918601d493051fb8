"""The conversation since the user last spoke, as the loop scan's steps, in each wire format.

Nothing here does I/O. `steps_of` reads a request as the client sent it (never changed)
into `reflexguard.core.loops.Step`s: each historical call, its arguments canonical, paired
with its result, its text normalised. It reads from the end back to the user's latest turn
and forward from there, so a long conversation costs only its last turn (BFCL's loops are
within one turn), and at most one pass over the whole when the user spoke only once.

- **The user's turn**: chat and Responses, a `user` message; Messages, a `user` message that
  carries no `tool_result` block (results travel in user messages there, sometimes with
  text beside them, such as Claude Code's reminders: that is the environment speaking).
- **Pairing**: a result answers the call with its id; a result whose id matches no
  unanswered call (empty or repeated ids, as tau2 writes them) answers the earliest
  unanswered call, by position.
- **Bounded**: at most MAX_SCANNED_CALLS calls back from the end are read. A loop shows in
  a few steps; reading 10,000 calls of one turn cost ~0.1-0.4 s of event loop here (2 busy
  cores), against ~10 ms for 1,000. Steps older than the bound are not seen, so a pair
  seen only there counts as new (the guard fires later, not sooner) and a poll whose result
  changed only there is not known as one; the edge counts the bound's use
  (`loop_scan_bound`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reflexguard.core.budget import content_text
from reflexguard.core.history import id_key
from reflexguard.core.loops import ERROR_MARK, Step, canonical, normal_text
from reflexguard.core.model import JsonObject

MAX_SCANNED_CALLS = 1000
Steps = tuple[list[Step], bool]  # the steps, and whether MAX_SCANNED_CALLS cut them short


class _Pairing:
    """Calls in order, and their results as they arrive."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.arguments: list[str] = []
        self.results: list[str | None] = []
        self.by_id: dict[object, int] = {}
        self.unanswered: dict[int, None] = {}  # an ordered set: the earliest first

    def call(self, call_id: object, name: object, arguments: object) -> None:
        if not isinstance(name, str):
            return
        at = len(self.names)
        self.names.append(name)
        self.arguments.append(canonical(arguments))
        self.results.append(None)
        self.unanswered[at] = None
        if call_id:  # any JSON value (issue 30): paired by its JSON text, never hashed raw
            self.by_id[id_key(call_id)] = at

    def result(self, call_id: object, text: str) -> None:
        at = self.by_id.pop(id_key(call_id), None) if call_id else None
        if at is None or at not in self.unanswered:
            at = next(iter(self.unanswered), None)
            if at is None:
                return  # a result no call is waiting for: nothing to pair
        del self.unanswered[at]
        self.results[at] = normal_text(text)

    def steps(self) -> list[Step]:
        return [Step(n, a, r) for n, a, r in zip(self.names, self.arguments, self.results,
                                                  strict=True)]


def _tail(items: list[Any], is_turn: Callable[[Any], bool],
          calls_in: Callable[[Any], int]) -> tuple[int, bool]:
    """Where to start reading: after the user's latest turn, or at the item from which at
    most MAX_SCANNED_CALLS calls follow (then True: the bound cut the reading short)."""
    calls = 0
    for at in range(len(items) - 1, -1, -1):
        item = items[at]
        if is_turn(item):
            return at + 1, False
        calls += calls_in(item)
        if calls > MAX_SCANNED_CALLS:
            return at + 1, True
    return 0, False


def _chat_turn(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "user"


def _chat_calls(message: Any) -> int:
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return len(calls) if isinstance(calls, list) else 0


def chat_steps(body: JsonObject) -> Steps:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return [], False
    pairing = _Pairing()
    start, cut = _tail(messages, _chat_turn, _chat_calls)
    for message in messages[start:]:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            pairing.result(message.get("tool_call_id"), content_text(message.get("content")))
            continue
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            continue
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                pairing.call(call.get("id"), function.get("name"), function.get("arguments"))
    return pairing.steps(), cut


def _messages_turn(message: Any) -> bool:
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    return not (isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def _messages_calls(message: Any) -> int:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_use")


def messages_steps(body: JsonObject) -> Steps:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return [], False
    pairing = _Pairing()
    start, cut = _tail(messages, _messages_turn, _messages_calls)
    for message in messages[start:]:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use":
                pairing.call(block.get("id"), block.get("name"), block.get("input"))
            elif kind == "tool_result":
                text = content_text(block.get("content"))
                pairing.result(block.get("tool_use_id"),
                               ERROR_MARK + text if block.get("is_error") is True else text)
    return pairing.steps(), cut


def _responses_turn(item: Any) -> bool:
    return (isinstance(item, dict) and item.get("role") == "user"
            and item.get("type", "message") == "message")


def _responses_calls(item: Any) -> int:
    return 1 if isinstance(item, dict) and item.get("type") == "function_call" else 0


def responses_steps(body: JsonObject) -> Steps:
    items = body.get("input")
    if not isinstance(items, list):
        return [], False  # a string input: one user message, no calls
    pairing = _Pairing()
    start, cut = _tail(items, _responses_turn, _responses_calls)
    for item in items[start:]:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            pairing.call(item.get("call_id"), item.get("name"), item.get("arguments"))
        elif kind == "function_call_output":
            pairing.result(item.get("call_id"), content_text(item.get("output")))
    return pairing.steps(), cut


READERS: dict[str, Callable[[JsonObject], Steps]] = {
    "chat": chat_steps, "messages": messages_steps, "responses": responses_steps}


def steps_of(body: JsonObject, dialect: str) -> Steps:
    """The steps since the user last spoke in a request of `dialect` (none if unknown), at
    most MAX_SCANNED_CALLS of them, and whether that bound cut them short."""
    reader = READERS.get(dialect)
    return reader(body) if reader is not None else ([], False)
