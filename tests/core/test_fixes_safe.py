"""The safe fixes: meaning-preserving rewrites of an invalid call, on by default, each
named (docs/repair.md, "Deterministic fixes"), and what they leave alone."""

from __future__ import annotations

import json
from typing import Any

from reflexguard.core.fixes import (
    ARGUMENTS_DECODED,
    NULL_DROPPED,
    SCALAR_COERCED,
    FixPolicy,
    apply_fixes,
)
from reflexguard.core.model import Reply, ToolCall
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply

TOOL = {"type": "function", "function": {"name": "find", "parameters": {
    "type": "object",
    "required": ["service_id", "when"],
    "properties": {
        "service_id": {"type": "integer"},
        "when": {"type": "string"},
        "district": {"type": "string", "default": None},
        "rating": {"type": "number"},
        "urgent": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
        "memo": {"type": "string", "nullable": True},
        "level": {"enum": ["low", "high", None]},
        "code": {"type": ["integer", "string"]},
        "filter": {"type": "object", "required": ["kind"], "properties": {
            "kind": {"type": "string"}, "limit": {"type": "integer"}}},
        "ids": {"type": "array", "items": {"type": "integer"}},
    },
}}}
RULES = CallRules(toolset=ToolSetCache().get([TOOL]))


def fixed(arguments: dict[str, Any] | str, policy: FixPolicy | None = None
          ) -> tuple[Any, list[str], bool]:
    """(the fixed arguments, parsed where they parse; the fixes; whether now valid)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    reply = Reply(tool_calls=(ToolCall(id="c", name="find", arguments=raw),))
    out, applied = apply_fixes(reply, validate_reply(reply, RULES), RULES.toolset,
                               policy or FixPolicy())
    text = out.tool_calls[0].arguments
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = text
    return value, applied, validate_reply(out, RULES).valid


def test_a_null_for_an_optional_property_is_dropped() -> None:
    value, applied, valid = fixed({"service_id": 1, "when": "now", "district": None})
    assert value == {"service_id": 1, "when": "now"} and applied == [NULL_DROPPED] and valid


def test_a_null_for_a_required_property_is_left_to_a_re_ask() -> None:
    value, applied, valid = fixed({"service_id": 1, "when": None})
    assert applied == [] and value == {"service_id": 1, "when": None} and not valid


def test_nested_optional_nulls_are_dropped_and_required_ones_kept() -> None:
    value, applied, _ = fixed({"service_id": 1, "when": "now",
                               "filter": {"kind": "a", "limit": None}})
    assert value["filter"] == {"kind": "a"} and applied == [NULL_DROPPED]


def test_a_nullable_property_is_valid_and_untouched() -> None:
    # Null is an answer there ("clear it"): valid, so no fix is even tried; and beside
    # another violation it stays as it is.
    value, applied, _ = fixed({"service_id": "x", "when": "now", "note": None,
                               "level": None, "memo": None})
    assert value["note"] is None and value["level"] is None and applied == []
    assert value["memo"] is None  # OpenAPI's nullable: an answer, though the schema refuses it


def test_numbers_and_booleans_written_as_strings_are_read_as_such() -> None:
    value, applied, valid = fixed({"service_id": "12", "when": "now", "rating": "4.5",
                                   "urgent": "true", "ids": ["1", "2"]})
    assert value == {"service_id": 12, "when": "now", "rating": 4.5, "urgent": True,
                     "ids": [1, 2]}
    assert applied == [SCALAR_COERCED] * 5 and valid


def test_strings_that_are_not_exactly_a_json_number_stay_strings() -> None:
    for text in ("007", " 5", "5 ", "1_000", "0x1f", "NaN", "1e999", "4.0", "True", "yes"):
        value, applied, valid = fixed({"service_id": text, "when": "now"})
        assert applied == [] and value["service_id"] == text and not valid, text


def test_a_schema_that_allows_a_string_keeps_it() -> None:
    _, applied, _ = fixed({"service_id": "x", "when": "now", "code": "12"})
    value, _, _ = fixed({"service_id": "x", "when": "now", "code": "12"})
    assert value["code"] == "12" and applied == []


def test_arguments_encoded_twice_are_decoded_once() -> None:
    inner = {"service_id": 1, "when": "now"}
    value, applied, valid = fixed(json.dumps(json.dumps(inner)))
    assert value == inner and applied == [ARGUMENTS_DECODED] and valid


def test_a_string_that_is_not_an_object_is_not_decoded() -> None:
    for raw in (json.dumps("hello"), json.dumps(json.dumps([1, 2])), json.dumps("{bad")):
        _, applied, valid = fixed(raw)
        assert applied == [] and not valid


def test_the_safe_fixes_are_switched_off_together() -> None:
    off = FixPolicy(safe=False)
    assert fixed({"service_id": 1, "when": "now", "district": None}, off)[1] == []
    assert fixed({"service_id": "1", "when": "now"}, off)[1] == []
    assert fixed(json.dumps(json.dumps({"service_id": 1, "when": "now"})), off)[1] == []


def test_model_output_past_pythons_limits_is_left_to_a_re_ask() -> None:
    """Review finding: 5,000 digits (past int()'s 4,300) and a doubly encoded integer past
    64 bits raised out of the ladder, a 500 of our own where no guard passes the call."""
    value, applied, valid = fixed({"service_id": "1" * 5000, "when": "now"})
    assert applied == [] and not valid and value["service_id"] == "1" * 5000
    big = json.dumps(json.dumps({"service_id": 12345678901234567890123, "when": "now"}))
    value, applied, _ = fixed(big)
    assert applied == [] and value == json.loads(big)
