"""A native request whose tools list was seen before (known_tools.KnownTools) reads exactly as
its full reading does: the same body, chat view, dropped fields, rules and errors; only
what the full reading accepted is learned, and any doubt goes back to it (issue 23)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from reflexguard.core.errors import BadRequest
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects import reader
from reflexguard.dialects.chat_request import GroundingPolicy, parse_body
from reflexguard.dialects.known_tools import PARSED_BOUNDS, KnownTools
from reflexguard.dialects.messages import MESSAGES
from reflexguard.dialects.native import Dialect
from reflexguard.dialects.reader import read_request
from reflexguard.dialects.responses import RESPONSES
from tests.dialects.known import seen
from tests.http.dialect_fixtures import messages_body, responses_body

GROUNDING = GroundingPolicy()
LONG = "You are a retail agent. " * 40  # past MIN_SPLIT_BYTES, where a split pays
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
NAMESPACE = {"type": "namespace", "name": "shop", "tools": [
    {"type": "function", "name": "refund", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}}}]}

BODIES: dict[str, tuple[Dialect, dict[str, Any]]] = {
    "messages": (MESSAGES, messages_body()),
    "messages, a choice and a server tool": (MESSAGES, messages_body(
        tools=[*messages_body()["tools"], WEB_SEARCH],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        thinking={"type": "enabled", "budget_tokens": 1024}, stream=True)),
    "messages, only a server tool": (MESSAGES, messages_body(tools=[WEB_SEARCH],
                                                             system=LONG)),
    "responses": (RESPONSES, responses_body()),
    "responses, a namespace and a built-in": (RESPONSES, responses_body(
        tools=[*responses_body()["tools"], NAMESPACE, {"type": "web_search"}],
        tool_choice={"type": "function", "name": "cancel_order"},
        parallel_tool_calls=False, include=["reasoning.encrypted_content"])),
    "responses, no tools": (RESPONSES, responses_body(tools=[], instructions=LONG)),
}




def raw_of(body: dict[str, Any], pretty: bool = False) -> bytes:
    return json.dumps(body, indent=2).encode() if pretty else orjson.dumps(body)


@pytest.mark.parametrize("pretty", [False, True], ids=["compact", "indented"])
@pytest.mark.parametrize("case", list(BODIES))
def test_a_known_list_reads_as_the_full_reading(
        case: str, pretty: bool, fresh: KnownTools, monkeypatch: pytest.MonkeyPatch) -> None:
    dialect, body = BODIES[case]
    raw = raw_of(body, pretty)
    cache = ToolSetCache()
    first = read_request(raw, dialect, cache, GROUNDING)
    assert len(fresh.held()) == 1  # learned from the full reading
    full_reading = reader._parsed

    def not_again(*_: Any) -> Any:
        raise AssertionError("read in full although its tools are known")

    monkeypatch.setattr(reader, "_parsed", not_again)
    later = read_request(raw, dialect, cache, GROUNDING)
    assert seen(later) == seen(first)
    assert list(later.body) == list(body)  # the keys in the client's order
    monkeypatch.setattr(reader, "_parsed", full_reading)
    # A later turn: the same tools, a longer conversation.
    turn = raw_of({**body, "max_tokens": 99, "metadata": {"user_id": "u-1"}}, pretty)
    monkeypatch.setattr(reader, "_parsed", not_again)
    known = read_request(turn, dialect, cache, GROUNDING)
    monkeypatch.setattr(reader, "_parsed", full_reading)
    assert seen(known) == seen(reader.dialect_request(orjson.loads(turn), dialect, cache,
                                                      GROUNDING))


def error(raw: bytes, dialect: Dialect) -> tuple[str, str | None, str | None]:
    with pytest.raises(BadRequest) as caught:
        read_request(raw, dialect, ToolSetCache(), GROUNDING)
    return str(caught.value), caught.value.param, caught.value.code


DEEP: dict[str, Any] = {"x": [[[[[[[[[[[[]]]]]]]]]]]]}
BROKEN: dict[str, dict[str, dict[str, Any]]] = {  # a field each dialect refuses
    "the conversation's type": {"messages": {"messages": "hi"}, "responses": {"input": 5}},
    "a turn's shape": {"messages": {"messages": [{"content": "hi"}]},
                       "responses": {"input": ["x"]}},
    "stream not a boolean": {"messages": {"stream": "yes"}, "responses": {"stream": "yes"}},
    "nesting past the limit": {"messages": {"metadata": DEEP}, "responses": {"metadata": DEEP}},
}


@pytest.mark.parametrize("broken", list(BROKEN))
@pytest.mark.parametrize("case", ["messages", "responses"])
def test_a_known_list_in_a_bad_request_gets_the_full_readings_error(
        case: str, broken: str, fresh: KnownTools) -> None:
    dialect, body = BODIES[case]
    bad = raw_of({**body, **BROKEN[broken][case]})
    if broken == "nesting past the limit":
        expected = _deep_error(bad, dialect)
        read_request(raw_of(body), dialect, ToolSetCache(), GROUNDING)  # learned
        with pytest.raises(BadRequest) as caught:
            read_request(bad, dialect, ToolSetCache(), GROUNDING, max_depth=8)
        assert (str(caught.value), caught.value.code) == expected
        return
    before = error(bad, dialect)  # nothing known yet: the full reading's words
    read_request(raw_of(body), dialect, ToolSetCache(), GROUNDING)
    assert len(fresh.held()) == 1
    assert error(bad, dialect) == before


def _deep_error(raw: bytes, dialect: Dialect) -> tuple[str, str | None]:
    with pytest.raises(BadRequest) as caught:
        reader.dialect_request(parse_body(raw, 8), dialect, ToolSetCache(), GROUNDING)
    return str(caught.value), caught.value.code


def test_a_list_past_the_depth_limit_is_never_learned(fresh: KnownTools) -> None:
    body = messages_body()
    deep: Any = {"type": "object"}
    for _ in range(8):
        deep = {"type": "object", "properties": {"x": deep}}
    body["tools"][0]["input_schema"] = deep
    with pytest.raises(BadRequest):
        read_request(raw_of(body), MESSAGES, ToolSetCache(), GROUNDING, max_depth=12)
    assert len(fresh.held()) == 0


def test_a_key_given_twice_is_left_to_the_full_reading(fresh: KnownTools) -> None:
    """JSON keeps a duplicate key's last value: a split that stood for the first list must
    not answer for the body, whose list is the second."""
    cache = ToolSetCache()
    body = messages_body()
    read_request(raw_of(body), MESSAGES, cache, GROUNDING)
    tools = raw_of(body["tools"])
    other = raw_of(body["tools"][:1])
    twice = raw_of(body)[:-1] + b',"tools":' + other + b"}"
    assert tools in twice
    request = read_request(twice, MESSAGES, cache, GROUNDING)
    assert request.body["tools"] == body["tools"][:1]
    assert request.chat.rules is not None
    assert list(request.chat.rules.toolset.names) == [body["tools"][0]["name"]]


def test_known_lists_are_bounded(fresh: KnownTools) -> None:
    cache = ToolSetCache()
    for n in range(PARSED_BOUNDS.lists + 5):
        tools = [{**messages_body()["tools"][0], "description": f"variant {n}"}]
        read_request(raw_of(messages_body(tools=tools, system=LONG)), MESSAGES, cache,
                             GROUNDING)
    assert len(fresh.held()) == PARSED_BOUNDS.lists


def test_a_list_past_the_byte_bound_is_read_in_full_and_never_held(fresh: KnownTools) -> None:
    cache = ToolSetCache()
    tool = {**messages_body()["tools"][0],
            "description": "x" * (PARSED_BOUNDS.list_bytes + 1)}
    body = messages_body(tools=[tool], system=LONG)
    for _ in range(2):
        request = read_request(raw_of(body), MESSAGES, cache, GROUNDING)
        assert request.body["tools"] == [tool]
    assert not fresh.held() and not fresh.indexed()
