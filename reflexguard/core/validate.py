"""Classifying every tool call of a reply into exactly one channel.

Nothing here does I/O, and nothing here raises on anything a model can emit: the
reply is untrusted input and the verdict is data.

Precedence within one call: unknown_tool, malformed_args, schema_violation,
choice_violation, ungrounded_entity, then ok. A reply without calls yields
empty_reply, vanished_call (one per call written as text), choice_violation (a call was
required), or nothing at all (a plain text answer is not a tool call).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from reflexguard.core.channels import Channel
from reflexguard.core.extract import extract_calls
from reflexguard.core.grounding import GroundingSources, ungrounded_values
from reflexguard.core.model import CallVerdict, JsonObject, Reply, ToolCall, ToolChoice, Verdict
from reflexguard.core.tool_records import ToolSet, ToolSpec

MAX_ERRORS_REPORTED = 4


@dataclass(frozen=True)
class CallRules:
    """What the request asked of the reply's calls."""

    toolset: ToolSet
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    grounding: GroundingSources | None = None
    identifier_pattern: re.Pattern[str] | None = None


class _Malformed(ValueError):
    pass


def parse_arguments(raw: str) -> dict[str, Any]:
    """The arguments as a JSON object, or _Malformed with the reason."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # orjson refuses integers beyond 64 bits; the stdlib does not
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise _Malformed(f"not valid JSON ({exc})") from None
        # ...but the stdlib also reads a lone UTF-16 surrogate ("\ud800", half an emoji),
        # which no UTF-8 text can hold: no JSON Schema validator can read such a value,
        # and the agent's own decoder may refuse it. The model's error (issue 30).
        surrogate = _lone_surrogate(value)
        if surrogate is not None:
            raise _Malformed(f"not valid JSON (a lone UTF-16 surrogate {surrogate})") from None
    if not isinstance(value, dict):
        raise _Malformed(f"a JSON {type(value).__name__}, not an object")
    return value


def _lone_surrogate(value: object) -> str | None:
    """The first lone surrogate in `value`'s strings and keys, escaped; None when every
    string is valid Unicode text. One encode of the stdlib's re-serialisation: linear in
    the value, which the stdlib has just read from text of that size."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return ascii(exc.object[exc.start:exc.end])
    except (ValueError, RecursionError):  # NaN and such were read; nesting the stdlib read
        return None
    return None


def _classify_call(index: int, call: ToolCall, rules: CallRules) -> CallVerdict:
    def verdict(channel: Channel, detail: str = "") -> CallVerdict:
        return CallVerdict(channel=channel, index=index, name=call.name, detail=detail)

    spec = rules.toolset.get(call.name)
    if spec is None:
        return verdict(Channel.UNKNOWN_TOOL, f"no tool named {call.name!r} was offered")
    try:
        arguments = parse_arguments(call.arguments)
    except _Malformed as exc:
        return verdict(Channel.MALFORMED_ARGS, f"arguments are {exc}")
    try:
        problems = spec.errors(arguments)
    except Exception as exc:  # the validator's own fault: never the model's, never "valid"
        return CallVerdict(channel=Channel.CHECK_FAULT, index=index, name=call.name,
                           detail=f"the validator failed: {type(exc).__name__}",
                           note="validator_error")
    if problems:
        return verdict(Channel.SCHEMA_VIOLATION, "; ".join(problems[:MAX_ERRORS_REPORTED]))
    choice = rules.tool_choice
    if choice.mode == "none":
        return verdict(Channel.CHOICE_VIOLATION, "tool_choice is 'none' but a tool was called")
    if choice.mode == "named" and call.name != choice.name:
        return verdict(Channel.CHOICE_VIOLATION, f"tool_choice requires {choice.name!r}")
    if index > 0 and not rules.parallel_tool_calls:
        return verdict(Channel.CHOICE_VIOLATION, "parallel_tool_calls is false: one call only")
    if rules.grounding is not None and rules.identifier_pattern is not None:
        missing = ungrounded_values(
            arguments, rules.grounding, rules.toolset.schema_text, rules.identifier_pattern
        )
        if missing:
            listed = ", ".join(f"{k}={v!r}" for k, v in missing[:MAX_ERRORS_REPORTED])
            return verdict(
                Channel.UNGROUNDED_ENTITY,
                f"{listed} appears in no user message or tool result",
            )
    return verdict(Channel.OK)


def _classify_text_reply(reply: Reply, rules: CallRules) -> Verdict:
    if reply.is_empty:
        return Verdict(calls=(
            CallVerdict(channel=Channel.EMPTY_REPLY, detail="neither content nor tool calls"),))
    extraction = extract_calls(reply.content)
    notes = (extraction.capped,) if extraction.capped else ()
    written = extraction.calls
    if written:
        return Verdict(notes=notes, calls=tuple(
            CallVerdict(
                channel=Channel.VANISHED_CALL,
                name=call.name,
                detail="a tool call was written as text instead of being called",
            )
            for call in written
        ))
    if rules.tool_choice.mode in ("required", "named"):
        wanted = rules.tool_choice.name or "a tool"
        detail = f"tool_choice requires calling {wanted}, but the reply has no call"
        return Verdict(notes=notes,
                       calls=(CallVerdict(channel=Channel.CHOICE_VIOLATION, detail=detail),))
    return Verdict(notes=notes)


def validate_reply(reply: Reply, rules: CallRules) -> Verdict:
    if reply.tool_calls:
        return Verdict(calls=tuple(
            _classify_call(i, call, rules) for i, call in enumerate(reply.tool_calls)))
    return _classify_text_reply(reply, rules)


def clean_tool_calls(completion: JsonObject, rules: CallRules) -> tuple[str, ...] | None:
    """The names of the calls when every choice of `completion` is a reply of tool calls
    that `validate_reply` would classify all ok, with no note; None otherwise, which means
    only "read it in full", never "invalid". Most answers are clean: this reads them
    without building a Reply or a Verdict per call (docs/performance.md, "The clean
    answer"). tests/core/test_clean_calls.py holds it to validate_reply."""
    if not shortcut_applies(rules):
        return None
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    names: list[str] = []
    for choice in choices:
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(calls, list) or not calls:
            return None
        if len(calls) > 1 and not rules.parallel_tool_calls:
            return None
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                return None
            spec = clean_spec(function.get("name"), rules)
            if spec is None or not accepts_json(spec, function.get("arguments")):
                return None
            names.append(spec.name)
    return tuple(names)


def shortcut_applies(rules: CallRules) -> bool:
    """The rules under which a clean-answer shortcut may answer at all: grounding reads
    every value against the conversation, and tool_choice "none" makes any call a
    violation, so both are left to the full reading."""
    return rules.grounding is None and rules.tool_choice.mode != "none"


def clean_spec(name: object, rules: CallRules) -> ToolSpec | None:
    """The offered tool `name` calls, when the request's tool_choice allows calling it
    (the clean-answer shortcuts' test of a call's name, chat's and the native dialects')."""
    spec = rules.toolset.specs.get(name) if isinstance(name, str) else None
    if spec is None:
        return None
    if rules.tool_choice.mode == "named" and spec.name != rules.tool_choice.name:
        return None
    return spec


def accepts_json(spec: ToolSpec, arguments: object) -> bool:
    """`arguments` is a JSON string of an object `spec` accepts (the shortcuts' test)."""
    if not isinstance(arguments, str):
        return False
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and spec.accepts(parsed)
