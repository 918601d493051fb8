"""Deterministic fixes, tried before asking the model again. Nothing here does I/O.

Each fix is reported by name so that it is counted: a fixed call was still an error of
the model's, and an operator must see how often the proxy papered over one.

Two kinds (docs/repair.md, "Deterministic fixes"). The safe fixes (`safe_fixes`, on by
default) change how a value is written, never what it says: a `null` for a property that
is not required is dropped, a number or boolean written as a string is read as one, a
string that matches exactly one `enum` member but for letter case is written as that
member, and arguments encoded twice are decoded once. The guessing fixes (`json_repair`,
`snap_names`) are opt-in: they choose among readings the model may not have meant.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import json_repair
import orjson
from rapidfuzz import fuzz, process

from reflexguard.core.channels import Channel
from reflexguard.core.model import Reply, ToolCall, Verdict
from reflexguard.core.tool_records import ToolSet

JSON_REPAIRED = "json_repaired"
NAME_SNAPPED = "name_snapped"
NULL_DROPPED = "optional_null_dropped"
SCALAR_COERCED = "string_scalar_coerced"
ARGUMENTS_DECODED = "double_encoded_arguments_decoded"
ENUM_CASE_FIXED = "enum_case_normalised"
# A schema's nesting the safe fixes walk at most; deeper values are left as they are.
MAX_FIX_DEPTH = 32
# Values the safe fixes visit in one call's arguments at most (issue 18: a 500,000-item
# array cost ~1 s of event loop per attempt). Past it the arguments are left as they are
# and the re-ask decides: a fix is a shortcut, never owed.
MAX_FIX_VALUES = 10_000
# Enum members the case fix compares, over all of one call's values; past it a wrong case
# is left to the re-ask (a 20,000-member enum times 10,000 values would be 2e8 compares).
MAX_ENUM_CASE_COMPARES = 50_000
# Exactly JSON's own number grammar: "007", " 5", "1_000", "0x1f" and "NaN" stay strings.
_JSON_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class FixPolicy:
    json_repair: bool = False
    snap_names: bool = False
    snap_threshold: float = 85.0
    # The meaning-preserving fixes: NULL_DROPPED, SCALAR_COERCED, ENUM_CASE_FIXED,
    # ARGUMENTS_DECODED.
    safe: bool = True

    @property
    def any(self) -> bool:
        return self.safe or self.json_repair or self.snap_names


def _types(schema: dict[str, Any]) -> frozenset[str] | None:
    """The JSON types a (sub)schema names in `type`; None when it names none, in which
    case the safe fixes leave its value alone (anyOf, $ref, enum only: not read here)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset((declared,))
    if isinstance(declared, list) and all(isinstance(t, str) for t in declared):
        return frozenset(declared)
    return None


def _coerced(value: str, types: frozenset[str]) -> tuple[bool, Any]:
    """A string read as the number or boolean the schema asks for, when it is exactly
    one in JSON's own spelling; (False, None) otherwise. A schema that also allows a
    string keeps the string."""
    if "string" in types:
        return False, None
    try:  # Python refuses integers of more than 4,300 digits: such a string stays a string
        if "integer" in types and _JSON_INTEGER.fullmatch(value):
            return True, int(value)
        if "number" in types and _JSON_NUMBER.fullmatch(value):
            number = json.loads(value)
            return (True, number) if isinstance(number, int | float) \
                and abs(number) != float("inf") else (False, None)
    except ValueError:
        return False, None
    if "boolean" in types and value in _BOOLEANS:
        return True, _BOOLEANS[value]
    return False, None


class _TooManyValues(Exception):
    """The arguments hold more values than the safe fixes will visit (MAX_FIX_VALUES)."""


class _Applied(list[str]):
    """The fixes applied so far, and the values visited against MAX_FIX_VALUES (and the
    enum members compared against MAX_ENUM_CASE_COMPARES)."""

    visited = 0
    compared = 0

    def visit(self) -> None:
        self.visited += 1
        if self.visited > MAX_FIX_VALUES:
            raise _TooManyValues

    def compare(self, members: int) -> bool:
        """Whether `members` more enum members may still be compared."""
        self.compared += members
        return self.compared <= MAX_ENUM_CASE_COMPARES


def _enum_spelling(value: str, enum: list[Any], applied: _Applied) -> str | None:
    """The one enum member `value` matches but for letter case ("PlayStation" for
    "Playstation"); None when it is a member, matches none, or matches two members that
    differ only by case themselves (then the case carries meaning and the model decides).
    Unicode caseless matching (str.casefold)."""
    if not applied.compare(len(enum)) or value in enum:
        return None
    folded = value.casefold()
    matches = [m for m in enum if isinstance(m, str) and m.casefold() == folded]
    return matches[0] if len(matches) == 1 else None


def _safe_value(value: Any, schema: object, applied: _Applied, depth: int) -> Any:
    """`value` with the safe fixes applied where `schema` says what it must be."""
    if not isinstance(schema, dict) or depth > MAX_FIX_DEPTH:
        return value
    applied.visit()
    types = _types(schema)
    enum = schema.get("enum")
    if isinstance(value, str) and isinstance(enum, list):
        spelled = _enum_spelling(value, enum, applied)
        if spelled is not None:
            applied.append(ENUM_CASE_FIXED)
            return spelled
    if isinstance(value, str) and types is not None:
        changed, coerced = _coerced(value, types)
        if changed:
            applied.append(SCALAR_COERCED)
            return coerced
        return value
    if isinstance(value, dict):
        return _safe_object(value, schema, applied, depth)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_safe_value(item, schema["items"], applied, depth + 1) for item in value]
    return value


def _safe_object(value: dict[str, Any], schema: dict[str, Any], applied: _Applied,
                 depth: int) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return value
    required = schema.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    out: dict[str, Any] = {}
    for key, item in value.items():
        applied.visit()
        sub = properties.get(key)
        if item is None and key not in required_names and isinstance(sub, dict):
            types = _types(sub)
            enum = sub.get("enum")
            # Dropped only where the schema refuses null: a nullable property's null is
            # an answer ("clear it"), not a way of saying "not given" (OpenAPI's
            # `nullable: true` says so too, though JSON Schema does not read it).
            if types is not None and "null" not in types and not (
                    isinstance(enum, list) and None in enum) and sub.get("nullable") is not True:
                applied.append(NULL_DROPPED)
                continue
        out[key] = _safe_value(item, sub, applied, depth + 1)
    return out


def _decoded_twice(arguments: str) -> str | None:
    """Arguments that are a JSON string whose text is a JSON object, decoded once."""
    try:
        inner = json.loads(arguments)
        if not isinstance(inner, str):
            return None
        value = json.loads(inner)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # integers past 64 bits, nesting past orjson's: a re-ask
        return None


def _safe_arguments(arguments: str, parameters: dict[str, Any]) -> tuple[str, list[str]]:
    """Arguments with the schema-guided safe fixes, and their names (none: unchanged)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments, []
    if not isinstance(value, dict):
        return arguments, []
    applied = _Applied()
    try:
        fixed = _safe_object(value, parameters, applied, 0)
    except _TooManyValues:
        return arguments, []
    if not applied:
        return arguments, []
    try:
        return orjson.dumps(fixed).decode(), list(applied)
    except TypeError:  # beyond orjson's depth or integer range: left to a re-ask
        return arguments, []


# json-repair's guess runs on the event loop and is slow on long broken text: ~6 us a
# character, superlinear past that (a 600 KB unterminated string took 17 s; the fuzz
# suite's Messages route found it, issue 18). Longer arguments are not guessed at: the call
# stays invalid and is re-asked.
MAX_JSON_REPAIR_CHARS = 16_384


def _repaired_json(arguments: str) -> str | None:
    if len(arguments) > MAX_JSON_REPAIR_CHARS:
        return None
    try:
        value = json_repair.loads(arguments)
    except Exception:  # json-repair is best effort; a failure means "no fix"
        return None
    if not isinstance(value, dict):
        return None
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # a guess that kept a lone surrogate: still malformed
        return None


def _snapped_name(name: str, toolset: ToolSet, threshold: float) -> str | None:
    best = process.extractOne(name, toolset.names, scorer=fuzz.ratio)
    if best is None or best[1] < threshold:
        return None
    return str(best[0])


def apply_fixes(
    reply: Reply, verdict: Verdict, toolset: ToolSet, policy: FixPolicy
) -> tuple[Reply, list[str]]:
    """The reply with what can be fixed without the model, and the fixes applied."""
    if not policy.any or not reply.tool_calls:
        return reply, []
    applied: list[str] = []
    calls = list(reply.tool_calls)
    for call_verdict in verdict.calls:
        if call_verdict.index is None:
            continue
        call = calls[call_verdict.index]
        if call_verdict.channel is Channel.UNKNOWN_TOOL and policy.snap_names:
            snapped = _snapped_name(call.name, toolset, policy.snap_threshold)
            if snapped:
                calls[call_verdict.index] = ToolCall(
                    id=call.id, name=snapped, arguments=call.arguments
                )
                applied.append(NAME_SNAPPED)
        elif call_verdict.channel is Channel.MALFORMED_ARGS:
            decoded = _decoded_twice(call.arguments) if policy.safe else None
            repaired = decoded or (_repaired_json(call.arguments) if policy.json_repair
                                   else None)
            if repaired is not None:
                calls[call_verdict.index] = ToolCall(id=call.id, name=call.name, arguments=repaired)
                applied.append(ARGUMENTS_DECODED if decoded else JSON_REPAIRED)
        elif call_verdict.channel is Channel.SCHEMA_VIOLATION and policy.safe:
            spec = toolset.get(call.name)
            if spec is None:
                continue
            arguments, fixes = _safe_arguments(call.arguments, spec.parameters)
            if fixes:
                calls[call_verdict.index] = ToolCall(id=call.id, name=call.name,
                                                     arguments=arguments)
                applied.extend(fixes)
    if not applied:
        return reply, []
    fixed = Reply(content=reply.content, tool_calls=tuple(calls), finish_reason=reply.finish_reason)
    return fixed, applied
