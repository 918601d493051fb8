"""The clean-answer shortcut for native Messages and Responses replies. Nothing here does I/O.

validate.clean_tool_calls' twin for the two native dialects: it reads a Messages reply's
tool_use blocks or a Responses reply's function_call items straight from the native JSON,
without translating the reply to the chat view (completion_of), reading it into replies
and verdicts, or writing it back. It says "clean" (the names of the calls) only where
completion_of + read_attempt + validate_reply would find every call ok with no note;
None means only "read it in full", never "invalid". It applies under exactly the rules
chat's shortcut applies under (no grounding, tool_choice not "none", one call when
parallel calls are off, the named tool when one is named), and declines whatever it does
not know to be harmless: a block or item type other than text, thinking and calls (server
tool use, web search calls, ...), arguments not in their usual form, content not a list.
tests/core/test_clean_calls_native.py holds it to the full reading.
"""

from __future__ import annotations

from collections.abc import Callable

from reflexguard.core.model import JsonObject
from reflexguard.core.tool_records import ToolSpec
from reflexguard.core.validate import CallRules, accepts_json, clean_spec, shortcut_applies

# A native reply -> the names of its calls when all are clean, else None.
CleanCalls = Callable[[JsonObject, CallRules], tuple[str, ...] | None]

# Block and item types the full reading skips without effect on the verdict (text is read
# only when there is no call, and these replies have one), and which change nothing the
# agent gets when passed on as they came.
MESSAGES_PASSIVE = frozenset({"text", "thinking", "redacted_thinking"})
RESPONSES_PASSIVE = frozenset({"message", "reasoning"})


def _settled(names: list[str], rules: CallRules) -> tuple[str, ...] | None:
    if not names or (len(names) > 1 and not rules.parallel_tool_calls):
        return None
    return tuple(names)


def _clean_calls(items: object, rules: CallRules, call: str, passive: frozenset[str],
                 accepted: Callable[[ToolSpec, JsonObject], bool]) -> tuple[str, ...] | None:
    """The one walk of both dialects: `items` (content blocks, output items) whose every
    `call`-typed entry is a clean call (`accepted` reads its arguments) and whose every
    other entry is of a `passive` type: the calls' names, else None."""
    if not shortcut_applies(rules) or not isinstance(items, list):
        return None
    names: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        kind = item.get("type")
        if kind == call:
            spec = clean_spec(item.get("name"), rules)
            if spec is None or not accepted(spec, item):
                return None
            names.append(spec.name)
        elif kind not in passive:
            return None
        elif kind == "message" and not isinstance(item.get("content") or [], list):
            return None  # the full reading iterates it: left to it, whatever it does
    return _settled(names, rules)


def _input_accepted(spec: ToolSpec, block: JsonObject) -> bool:
    # `input` is the parsed object the full reading writes back to JSON and reads again
    # (messages.completion_of): parse_completion read it with orjson, so the round trip
    # gives the same object, and the same verdict.
    arguments = block.get("input")
    return isinstance(arguments, dict) and spec.accepts(arguments)


def _arguments_accepted(spec: ToolSpec, item: JsonObject) -> bool:
    return accepts_json(spec, item.get("arguments"))


def clean_messages_calls(message: JsonObject, rules: CallRules) -> tuple[str, ...] | None:
    """A Messages reply whose tool_use blocks are all clean: their names, else None."""
    return _clean_calls(message.get("content"), rules, "tool_use", MESSAGES_PASSIVE,
                        _input_accepted)


def clean_responses_calls(response: JsonObject, rules: CallRules) -> tuple[str, ...] | None:
    """A Responses reply whose function_call items are all clean: their names, else None."""
    return _clean_calls(response.get("output"), rules, "function_call", RESPONSES_PASSIVE,
                        _arguments_accepted)


CLEAN_CALLS: dict[str, CleanCalls] = {
    "messages": clean_messages_calls,
    "responses": clean_responses_calls,
}
