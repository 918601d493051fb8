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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reflexguard.core.loops import ERROR_MARK, Step, canonical, normal_text
from reflexguard.core.model import JsonObject


def _text(content: object) -> str:
    """A result's text: a string, or the text of its parts / blocks, joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(part["text"] for part in content
                     if isinstance(part, dict) and isinstance(part.get("text"), str))


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
        if call_id:
            self.by_id[call_id] = at

    def result(self, call_id: object, text: str) -> None:
        at = self.by_id.pop(call_id, None) if call_id else None
        if at is None or at not in self.unanswered:
            at = next(iter(self.unanswered), None)
            if at is None:
                return  # a result no call is waiting for: nothing to pair
        del self.unanswered[at]
        self.results[at] = normal_text(text)

    def steps(self) -> list[Step]:
        return [Step(n, a, r) for n, a, r in zip(self.names, self.arguments, self.results,
                                                  strict=True)]


def _last(items: list[Any], is_turn: Callable[[Any], bool]) -> int:
    """The position after the user's latest turn (0 when there is none)."""
    for at in range(len(items) - 1, -1, -1):
        if is_turn(items[at]):
            return at + 1
    return 0


def _chat_turn(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "user"


def chat_steps(body: JsonObject) -> list[Step]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    pairing = _Pairing()
    for message in messages[_last(messages, _chat_turn):]:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            pairing.result(message.get("tool_call_id"), _text(message.get("content")))
            continue
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            continue
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                pairing.call(call.get("id"), function.get("name"), function.get("arguments"))
    return pairing.steps()


def _messages_turn(message: Any) -> bool:
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    return not (isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def messages_steps(body: JsonObject) -> list[Step]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    pairing = _Pairing()
    for message in messages[_last(messages, _messages_turn):]:
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
                text = _text(block.get("content"))
                pairing.result(block.get("tool_use_id"),
                               ERROR_MARK + text if block.get("is_error") is True else text)
    return pairing.steps()


def _responses_turn(item: Any) -> bool:
    return (isinstance(item, dict) and item.get("role") == "user"
            and item.get("type", "message") == "message")


def responses_steps(body: JsonObject) -> list[Step]:
    items = body.get("input")
    if not isinstance(items, list):
        return []  # a string input: one user message, no calls
    pairing = _Pairing()
    for item in items[_last(items, _responses_turn):]:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            pairing.call(item.get("call_id"), item.get("name"), item.get("arguments"))
        elif kind == "function_call_output":
            pairing.result(item.get("call_id"), _text(item.get("output")))
    return pairing.steps()


READERS: dict[str, Callable[[JsonObject], list[Step]]] = {
    "chat": chat_steps, "messages": messages_steps, "responses": responses_steps}


def steps_of(body: JsonObject, dialect: str) -> list[Step]:
    """The steps since the user last spoke in a request of `dialect` (none if unknown)."""
    reader = READERS.get(dialect)
    return reader(body) if reader is not None else []
