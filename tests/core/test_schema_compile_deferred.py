"""A deferring tool-set cache (the HTTP edge's, issue 18): a miss raises CompileNeeded
instead of compiling on the caller's thread; `prepare` compiles touching nothing shared,
`store` keeps the outcome, and the same request then reads as a hit, a refusal or an
empty list exactly as an inline compile would have answered it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from reflexguard.core.tool_records import InvalidToolSchema
from reflexguard.core.toolset import CompileNeeded, ToolSetCache

TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {"name": "t", "parameters": {
    "type": "object", "properties": {"x": {"type": "string"}}}}}]


def settle(cache: ToolSetCache, raw: bytes) -> Any:
    with pytest.raises(CompileNeeded) as caught:
        cache.get_serialised(raw)
    cache.store(caught.value, cache.prepare(caught.value))
    return cache.get_serialised(raw)


def test_a_miss_is_deferred_then_read_as_a_hit() -> None:
    cache = ToolSetCache(defer=True)
    raw = orjson.dumps(TOOLS)
    toolset = settle(cache, raw)
    assert toolset is not None and toolset.names == ["t"]
    assert cache.get_serialised(raw) is toolset and cache.get(TOOLS) is toolset  # no raise


def test_a_refusal_is_settled_and_raised_again_without_compiling() -> None:
    cache = ToolSetCache(defer=True, max_schema_nodes=100)
    chain = {"$defs": {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
                       for i in range(20)} | {"d20": {"type": "string"}},
             "$ref": "#/$defs/d0"}
    raw = orjson.dumps([{"type": "function", "function": {"name": "w", "parameters": chain}}])
    with pytest.raises(InvalidToolSchema, match="'w'"):
        settle(cache, raw)
    with pytest.raises(InvalidToolSchema, match="'w'"):  # settled: no CompileNeeded now
        cache.get_serialised(raw)


def test_an_empty_list_is_settled_as_none() -> None:
    cache = ToolSetCache(defer=True)
    assert settle(cache, b"[ ]") is None
    assert cache.get_serialised(b"[ ]") is None


def test_tool_lists_differing_in_key_order_share_one_compiled_set() -> None:
    cache = ToolSetCache(defer=True)
    first = settle(cache, orjson.dumps(TOOLS))
    reordered = [{"function": {"parameters": TOOLS[0]["function"]["parameters"], "name": "t"},
                  "type": "function"}]
    assert settle(cache, orjson.dumps(reordered)) is first


def test_an_inline_cache_never_defers() -> None:
    assert ToolSetCache().get_serialised(orjson.dumps(TOOLS)) is not None


def test_a_set_too_large_for_the_exact_keys_still_reaches_the_request_that_waited() -> None:
    cache = ToolSetCache(defer=True, exact_key_bytes=16)  # no exact key fits
    raw = orjson.dumps(TOOLS)
    toolset = settle(cache, raw)
    assert toolset is not None and toolset.names == ["t"]
    assert cache.get(TOOLS) is toolset  # the dialect path's second read: the same hand-off
