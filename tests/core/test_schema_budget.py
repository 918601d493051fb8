"""Tool schemas get a work budget when compiled (issue 18): what expands past it, recurses
without end or fans out through recursion, or holds a quadratic lookbehind is refused with
the tool named; what fits validates with bounded work and one bounded message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reflexguard.core.channels import Channel
from reflexguard.core.model import Reply, ToolCall
from reflexguard.core.tool_records import InvalidToolSchema
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply


def chain(depth: int, combinator: str = "anyOf") -> dict[str, Any]:
    defs: dict[str, Any] = {
        f"d{i}": {combinator: [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(depth)}
    defs[f"d{depth}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def tools(parameters: dict[str, Any], name: str = "t") -> list[Any]:
    return [{"type": "function", "function": {"name": name, "parameters": parameters}}]


@pytest.mark.parametrize("combinator", ["anyOf", "oneOf", "allOf"])
def test_the_2_to_the_40_chain_is_refused_naming_the_tool(combinator: str) -> None:
    with pytest.raises(InvalidToolSchema) as caught:
        ToolSetCache().get(tools(chain(40, combinator), "wedge"))
    assert caught.value.tool_name == "wedge"
    assert "max_schema_nodes" in str(caught.value) and "20,000" in str(caught.value)


def test_the_budget_is_a_setting() -> None:
    ToolSetCache().get(tools(chain(8)))  # 2^9 nodes: within the default
    with pytest.raises(InvalidToolSchema, match=r"more than 100 schema nodes"):
        ToolSetCache(max_schema_nodes=100).get(tools(chain(8)))


def test_recursion_that_multiplies_per_level_is_refused() -> None:
    branch = {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}}
    schema = {"$defs": {"n": {"anyOf": [branch, branch]}}, "$ref": "#/$defs/n"}
    with pytest.raises(InvalidToolSchema, match="re-enters itself twice"):
        ToolSetCache().get(tools(schema))


def test_ordinary_recursion_is_accepted() -> None:
    any_json = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#"}},
                          {"type": "object", "additionalProperties": {"$ref": "#"}}]}
    tree = {"$defs": {"n": {"type": "object", "properties": {
        "left": {"$ref": "#/$defs/n"}, "right": {"$ref": "#/$defs/n"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}}, "$ref": "#/$defs/n"}
    # A cycle that never descends: jsonschema-rs reads it as vacuous, at no cost.
    in_place = {"$defs": {"a": {"$ref": "#/$defs/b"},
                          "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}},
                "$ref": "#/$defs/a"}
    for schema in (any_json, tree, in_place):
        ToolSetCache().get(tools(schema))


@pytest.mark.parametrize("pattern", ["(?<=(a+)+)b", "(?<!(a+)+)b", "(?<=a{2,})b"])
def test_an_unbounded_lookbehind_is_refused(pattern: str) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}
    with pytest.raises(InvalidToolSchema, match="lookbehind"):
        ToolSetCache().get(tools(schema))
    with pytest.raises(InvalidToolSchema, match="lookbehind"):  # as a property's pattern too
        ToolSetCache().get(tools({"type": "object", "patternProperties": {pattern: {}}}))


@pytest.mark.parametrize("pattern", [r"(?<=\$)\d+", r"^(?=.*[A-Z])(?=.*\d).{8,}$",
                                     r"^(?!.*\.\.).*$", r"(?<name>a+)"])
def test_bounded_lookaround_is_accepted(pattern: str) -> None:
    ToolSetCache().get(tools({"type": "object", "properties": {
        "x": {"type": "string", "pattern": pattern}}}))


def _verdict(parameters: dict[str, Any], arguments: str) -> Any:
    toolset = ToolSetCache().get(tools(parameters))
    reply = Reply(content=None, tool_calls=(ToolCall(id="c", name="t", arguments=arguments),))
    return validate_reply(reply, CallRules(toolset=toolset)).calls[0]


def test_a_pattern_over_its_backtracking_limit_is_the_validators_fault() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string",
                                                     "pattern": r"^(\w+\s?)*\1$"}}}
    call = _verdict(schema, '{"x": "' + "a" * 200 + '!"}')
    assert call.channel is Channel.CHECK_FAULT and call.note == "validator_error"


def test_a_huge_enum_is_one_short_message_quickly() -> None:
    enum = [f"v{i}" for i in range(20_000)]
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"enum": enum}}}}
    arguments = '{"a": [' + ",".join(['"zz"'] * 2000) + "]}"
    call = _verdict(schema, arguments)  # the time it takes: bench/perf/hostile_schemas.py
    assert call.channel is Channel.SCHEMA_VIOLATION
    assert len(call.detail) <= 400 and "a/0" in call.detail


def test_a_long_string_in_a_message_is_clipped() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^b"}}}
    call = _verdict(schema, '{"x": "' + "a" * 30_000 + '"}')
    assert call.channel is Channel.SCHEMA_VIOLATION and len(call.detail) <= 600


def test_a_fan_out_within_budget_answers_without_building_every_branch() -> None:
    call = _verdict(chain(11), '{"x": 1}')  # ~2^13 nodes, all in anyOf branches
    assert call.channel is Channel.SCHEMA_VIOLATION
    assert "do not match the schema of 't'" in call.detail


def test_many_optional_fields_keep_a_detailed_message() -> None:
    # pydantic's Optional: an anyOf of two per field. Only the widest union bounds the
    # cost of one error, so 60 of them with 40 values still get the precise message.
    schema = {"type": "object", "properties": {
        f"f{i}": {"anyOf": [{"type": "string"}, {"type": "null"}]} for i in range(60)}}
    arguments = {f"f{i}": "ok" for i in range(39)} | {"f59": 5}
    call = _verdict(schema, json.dumps(arguments))
    assert call.channel is Channel.SCHEMA_VIOLATION
    assert call.detail.startswith("f59: ") and "do not match the schema" not in call.detail


def test_a_ref_chain_longer_than_the_stack_is_a_clear_refusal() -> None:
    """Review finding: an 800-link $ref chain is flat JSON, and measuring it raised
    RecursionError (a 500, recompiled on every request)."""
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(800)}
    defs["d800"] = {"type": "string"}
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}
    with pytest.raises(InvalidToolSchema) as caught:
        ToolSetCache().get(tools(schema, "long"), 64)
    assert caught.value.tool_name == "long"


def test_a_cached_refusal_does_not_keep_each_requests_frames() -> None:
    """Review finding: re-raising the cached exception object chained every retry's
    frames (and their request bodies) onto it; each raise is a fresh copy now."""
    from reflexguard.core.toolset import CompileNeeded

    cache = ToolSetCache(defer=True)
    raw = json.dumps(tools({"type": "object", "properties": {"x": {"type": "strin"}}}))
    tool_list = json.loads(raw)
    try:
        cache.get(tool_list)
    except CompileNeeded as miss:
        cache.store(miss, cache.prepare(miss))
    seen = []
    for _ in range(3):
        with pytest.raises(InvalidToolSchema) as caught:
            cache.get(tool_list)
        seen.append(caught.value)
    assert len({id(e) for e in seen}) == 3
    assert all(e.tool_name == "t" and "invalid parameters" in str(e) for e in seen)
