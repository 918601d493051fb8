"""The nesting-depth bound: the level-at-a-time walk says what the definition says.

`depth_exceeds` guards every body and answer before code that recurses or re-encodes
sees it (docs/reliability.md), so its rewrite for speed (docs/performance.md) is checked
against the plain recursive definition, on generated JSON and at the boundary.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from reflexguard.core.limits import depth_exceeds

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner,
                                                                max_size=4),
    max_leaves=40,
)


def depth(value: Any) -> int:
    """The definition: containers on the longest path from the top, the top counted."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(JSON, st.integers(min_value=0, max_value=8))
def test_agrees_with_the_definition_on_any_json(value: Any, limit: int) -> None:
    assert depth_exceeds(value, limit) == (depth(value) > limit)


def chain(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(levels):
        value = [value, 2, "x"] if level % 2 else {"k": value, "n": None}
    return value


def test_the_limit_itself_is_allowed_and_one_more_is_not() -> None:
    for levels in (1, 2, 50, 100, 101, 300):
        value = chain(levels)
        assert depth_exceeds(value, levels) is False
        assert depth_exceeds(value, levels - 1) is True


def test_a_deep_branch_among_many_shallow_ones_is_found() -> None:
    """An answer's logprobs: hundreds of small containers, one of them too deep."""
    entries: list[Any] = [{"token": "a", "bytes": [97], "top_logprobs": [{"bytes": [97]}]}
                          for _ in range(400)]
    entries[317]["top_logprobs"][0]["bytes"] = chain(20)
    answer = orjson.loads(orjson.dumps({"choices": [{"logprobs": {"content": entries}}]}))
    assert depth(answer) == 28  # 8 levels down to the entry's bytes, then the chain's 20
    assert depth_exceeds(answer, 27) is True
    assert depth_exceeds(answer, 28) is False


def test_scalars_nest_nothing_and_containers_of_other_types_are_counted() -> None:
    assert depth_exceeds("x" * 10, 0) is False
    assert depth_exceeds(None, 0) is False
    assert depth_exceeds([], 0) is True
    # Not what orjson makes, but what a caller may build: a dict subclass is a container.
    assert depth_exceeds([OrderedDict(a=[1])], 2) is True
    assert depth_exceeds([OrderedDict(a=[1])], 3) is False
