"""A known native tools list found by its leading bytes (known_tools.KnownTools.find, issue 23):
no scan of the body, no serialisation of the chat list, and still exactly the full
reading's request, error and body, whatever else the body holds."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from reflexguard.core.errors import BadRequest
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects import reader
from reflexguard.dialects.chat_request import GroundingPolicy
from reflexguard.dialects.known_tools import LISTS_PER_PREFIX, PARSED_BOUNDS, KnownTools
from reflexguard.dialects.messages import MESSAGES
from reflexguard.dialects.native import Dialect, DialectRequest
from reflexguard.dialects.reader import read_request
from reflexguard.dialects.responses import RESPONSES
from tests.dialects.known import seen
from tests.http.dialect_fixtures import messages_body, responses_body

GROUNDING = GroundingPolicy()
LONG = "You are a retail agent. " * 40  # past MIN_SPLIT_BYTES
CASES: dict[str, tuple[Dialect, dict[str, Any]]] = {
    "messages": (MESSAGES, messages_body(system=LONG)),
    "responses": (RESPONSES, responses_body(instructions=LONG)),
}




def full_reading(raw: bytes, dialect: Dialect, cache: ToolSetCache) -> DialectRequest:
    return reader.dialect_request(orjson.loads(raw), dialect, cache, GROUNDING)


def refuse(*_: Any) -> Any:
    raise AssertionError("not the known list's road")


@pytest.mark.parametrize("case", list(CASES))
def test_a_known_list_is_neither_scanned_for_nor_serialised_again(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dialect, body = CASES[case]
    cache = ToolSetCache()
    read_request(orjson.dumps(body), dialect, cache, GROUNDING)  # learned
    turn = orjson.dumps({**body, "temperature": 0.5, "stream": True})
    expected = full_reading(turn, dialect, cache)
    monkeypatch.setattr(reader, "split_tools", refuse)  # the msgspec scan of the body
    monkeypatch.setattr(reader, "_parsed", refuse)
    monkeypatch.setattr(cache, "get", refuse)  # orjson.dumps of the chat list, a lookup
    assert seen(read_request(turn, dialect, cache, GROUNDING)) == seen(expected)


@pytest.mark.parametrize("case", list(CASES))
def test_the_same_list_under_an_earlier_tools_key_is_not_taken_for_the_bodys(
        case: str) -> None:
    """The first `"tools":` is a metadata key holding the very list: the stand-in lands
    there, the body's own `tools` is not it, so find declines and the split reads it."""
    dialect, body = CASES[case]
    cache = ToolSetCache()
    read_request(orjson.dumps(body), dialect, cache, GROUNDING)
    tricky = orjson.dumps({"metadata": {"tools": body["tools"]}, **body})
    assert tricky.index(b'"tools"') < tricky.rindex(b'"tools"')
    request = read_request(tricky, dialect, cache, GROUNDING)
    assert request.body == orjson.loads(tricky)  # metadata's copy intact, no stand-in
    assert seen(request) == seen(full_reading(tricky, dialect, cache))


@pytest.mark.parametrize("case", list(CASES))
def test_a_known_list_under_another_apps_cache_gets_that_caches_verdict(case: str) -> None:
    """The rules kept with a list are its compiling cache's; another cache (its own schema
    limits) is asked, and a refusal is the full reading's, in the dialect's words."""
    dialect, body = CASES[case]
    raw = orjson.dumps(body)
    read_request(raw, dialect, ToolSetCache(), GROUNDING)  # learned
    strict = ToolSetCache(max_schema_nodes=2)
    with pytest.raises(BadRequest) as known:
        read_request(raw, dialect, strict, GROUNDING)
    with pytest.raises(BadRequest) as full:
        full_reading(raw, dialect, ToolSetCache(max_schema_nodes=2))
    assert (str(known.value), known.value.param, known.value.code) == \
        (str(full.value), full.value.param, full.value.code)


def test_a_body_that_ends_inside_the_list_or_right_after_it_is_the_full_readings(
        fresh: KnownTools) -> None:
    dialect, body = CASES["messages"]
    cache = ToolSetCache()
    raw = orjson.dumps({k: v for k, v in body.items() if k != "tools"} | {"tools":
                                                                          body["tools"]})
    read_request(raw, dialect, cache, GROUNDING)
    for broken in (raw[:-1], raw[:-20], raw[:-1] + b",}"):
        with pytest.raises(BadRequest) as caught:
            read_request(broken, dialect, cache, GROUNDING)
        assert "not valid JSON" in str(caught.value)


def test_the_prefix_index_holds_only_known_lists(fresh: KnownTools) -> None:
    cache = ToolSetCache()
    for n in range(PARSED_BOUNDS.lists + 5):
        tools = [{**messages_body()["tools"][0], "description": f"variant {n}"}]
        read_request(orjson.dumps(messages_body(tools=tools, system=LONG)), MESSAGES,
                             cache, GROUNDING)
    assert fresh.indexed() <= fresh.held()
    assert len(fresh.indexed()) <= PARSED_BOUNDS.lists
    assert all(len(lists) <= LISTS_PER_PREFIX for lists in fresh._by_prefix.values())
