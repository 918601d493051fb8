"""The tool-set cache on the hot path: a hit neither walks nor re-hashes the schemas, yet
key order and whitespace never change a verdict, the cache stays bounded, and the request's
nesting limit still holds for the tools it no longer walks."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from reflexguard.core import toolset as toolset_module
from reflexguard.core.errors import BadRequest
from reflexguard.core.limits import depth_exceeds
from reflexguard.core.model import Reply, ToolCall
from reflexguard.core.tool_compile import nesting_depth
from reflexguard.core.tool_records import ToolsTooDeep
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import validate_reply
from reflexguard.dialects.chat_request import CHAT, GroundingPolicy
from reflexguard.dialects.reader import read_request

NO_GROUNDING = GroundingPolicy()


def tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"{name} (with a description, as agents send)",
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


TOOLS = [
    tool("cancel_pending_order", {
        "order_id": {"type": "string", "pattern": "^#W[0-9]{7}$"},
        "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}},
        ["order_id", "reason"]),
    tool("modify_address", {
        "state": {"type": "string", "enum": ["CA", "NY", "TX"]},
        "lines": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
        ["state", "lines"]),
]

CALLS = [  # valid, a bad enum, a missing field, a wrong type, an unknown tool, not JSON
    ("cancel_pending_order", '{"order_id": "#W1234567", "reason": "ordered by mistake"}'),
    ("cancel_pending_order", '{"order_id": "#W1234567", "reason": "changed my mind"}'),
    ("cancel_pending_order", '{"order_id": "#W1234567"}'),
    ("modify_address", '{"state": "CA", "lines": "1 Main St"}'),
    ("cancel_order", '{"order_id": "#W1234567"}'),
    ("modify_address", '{"state": "CA", '),
]


def reversed_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: reversed_keys(v) for k, v in reversed(list(value.items()))}
    if isinstance(value, list):
        return [reversed_keys(v) for v in value]
    return value


def raw_request(tools: Any, indent: int | None = None, **extra: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "cancel #W1234567"}],
            "tools": tools, **extra}
    return json.dumps(body, indent=indent).encode()


def verdicts(raw: bytes, cache: ToolSetCache) -> list[Any]:
    rules = read_request(raw, CHAT, cache, NO_GROUNDING).rules
    assert rules is not None
    return [validate_reply(Reply(tool_calls=(ToolCall(id="c", name=n, arguments=a),)), rules)
            for n, a in CALLS]


def test_key_order_and_whitespace_share_one_compiled_set_and_every_verdict() -> None:
    cache = ToolSetCache()
    variants = [raw_request(TOOLS), raw_request(TOOLS, indent=2),
                raw_request(reversed_keys(TOOLS)), raw_request(reversed_keys(TOOLS), indent=4)]
    sets = [read_request(raw, CHAT, cache, NO_GROUNDING).rules for raw in variants]
    assert all(rules is not None and rules.toolset is sets[0].toolset  # type: ignore[union-attr]
               for rules in sets)
    assert cache.misses == 1
    expected = verdicts(variants[0], ToolSetCache())
    assert [v.valid for v in expected] == [True, False, False, False, False, False]
    for raw in variants:
        assert verdicts(raw, cache) == expected
        assert verdicts(raw, ToolSetCache()) == expected  # and as each would compile alone


def test_tool_sets_that_differ_never_share_an_entry() -> None:
    other = json.loads(json.dumps(TOOLS))
    other[0]["function"]["parameters"]["properties"]["reason"]["enum"] = ["changed my mind"]
    cache = ToolSetCache()
    first, second = verdicts(raw_request(TOOLS), cache), verdicts(raw_request(other), cache)
    assert first[0].valid and not first[1].valid
    assert not second[0].valid and second[1].valid
    assert cache.misses == 2


def test_a_hit_neither_walks_nor_hashes_the_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ToolSetCache()
    raw = raw_request(TOOLS)
    limit = 10  # low enough that the body's brackets call for a depth walk
    read_request(raw, CHAT, cache, NO_GROUNDING, max_depth=limit)

    def per_request_work(*_: object) -> Any:
        raise AssertionError("tool-set work done again on a hit")

    def walk_without_tools(value: Any, limit: int) -> bool:
        walks_tools = (isinstance(value, dict) and "tools" in value) or (
            isinstance(value, list) and value and isinstance(value[0], dict)
            and "function" in value[0])
        assert not walks_tools, "the tools walked again on a hit"
        return depth_exceeds(value, limit)

    monkeypatch.setattr(toolset_module, "nesting_depth", per_request_work)
    monkeypatch.setattr(toolset_module, "tool_set_digest", per_request_work)
    monkeypatch.setattr("reflexguard.dialects.chat_request.depth_exceeds", walk_without_tools)
    assert read_request(raw, CHAT, cache, NO_GROUNDING, max_depth=limit).rules is not None
    assert cache.hits == 1


def test_the_cache_stays_bounded_by_entries_and_by_key_bytes() -> None:
    cache = ToolSetCache(capacity=3, exact_key_bytes=1_000)
    for n in range(10):
        tools = [tool(f"tool_{n}", {"x": {"type": "string"}}, ["x"])]
        assert len(orjson.dumps(tools)) < 1_000
        cache.get(tools)
        by_digest, exact, held = cache.sizes
        assert by_digest <= 3 and exact <= 3 and held <= 1_000
    big = [tool(f"tool_{n}", {"x": {"type": "string"}}, ["x"]) for n in range(20)]
    first = cache.get(big)  # larger than the key budget: held by its digest only
    assert cache.sizes[2] <= 1_000
    assert cache.get(big) is first
    assert cache.misses == 11


def schema_nesting(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize("limit", [20, 40])
def test_tools_obey_the_body_nesting_limit_cold_and_cached(limit: int) -> None:
    warm = ToolSetCache()
    for levels in range(limit - 12, limit - 2):
        raw = raw_request([tool("deep", {"x": schema_nesting(levels)}, ["x"])])
        too_deep = depth_exceeds(orjson.loads(raw), limit)
        read_request(raw, CHAT, warm, NO_GROUNDING, max_depth=100)  # cached under a looser limit
        for cache in (ToolSetCache(), warm):
            if too_deep:
                with pytest.raises(BadRequest) as refused:
                    read_request(raw, CHAT, cache, NO_GROUNDING, max_depth=limit)
                assert refused.value.code == "nesting_too_deep"
            else:
                assert read_request(raw, CHAT, cache, NO_GROUNDING, max_depth=limit).guarded
    assert any(depth_exceeds(orjson.loads(raw_request([tool("d", {"x": schema_nesting(n)},
                                                                ["x"])])), limit)
               for n in range(limit - 12, limit - 2))  # the range crosses the limit


def test_the_rest_of_the_body_is_still_walked() -> None:
    raw = raw_request(TOOLS, metadata=json.loads("[" * 150 + "]" * 150))
    with pytest.raises(BadRequest) as refused:
        read_request(raw, CHAT, ToolSetCache(), NO_GROUNDING)
    assert refused.value.code == "nesting_too_deep"


def test_tools_deeper_than_orjson_writes_are_refused_as_too_deep() -> None:
    raw = raw_request([tool("deep", {"x": schema_nesting(300)}, ["x"])])
    with pytest.raises(BadRequest) as refused:
        read_request(raw, CHAT, ToolSetCache(), NO_GROUNDING, max_depth=200)
    assert refused.value.code == "nesting_too_deep"
    with pytest.raises(ToolsTooDeep):
        ToolSetCache().get(orjson.loads(raw)["tools"], max_depth=199)


def test_nesting_depth_counts_containers() -> None:
    assert nesting_depth("x") == 0
    assert nesting_depth([]) == 1
    assert nesting_depth({"a": [1, {"b": []}]}) == 4
