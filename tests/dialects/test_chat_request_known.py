"""Reading a chat request whose tools list the cache already holds (issue 23).

`read_request` first looks for a held list right after the body's first `"tools":`
(dialects/known_tools.py, `KnownTools.find`), compares its bytes, and parses only the rest,
with a random stand-in in the list's place that must come back as the body's own `tools`.
Whatever the body, a warm cache must read it as the full parse reads it: the same body,
tool set, rules and errors. Several bodies below are built to fool the shortcut (the held
list elsewhere, a `tools` key orjson reads later, an escaped key); the full reading is the
judge.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from reflexguard.core.errors import BadRequest
from reflexguard.core.limits import DEFAULT_MAX_JSON_DEPTH
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects import known_tools
from reflexguard.dialects.chat_request import (
    CHAT,
    RULES_PER_TOOLSET,
    GroundingPolicy,
    check_messages,
    parse_body,
    request_of,
)
from reflexguard.dialects.history import has_calls, repaired
from reflexguard.dialects.known_tools import KEY_PREFIX, Found, KnownTools, ShelfBounds
from reflexguard.dialects.reader import read_request
from tests.conftest import TOOLS, chat_body

PLAIN = GroundingPolicy()
HELD = orjson.dumps(TOOLS)
OTHER = [{"type": "function", "function": {"name": "other", "parameters": {
    "type": "object", "properties": {}}}}]


def warm() -> ToolSetCache:
    cache = ToolSetCache()
    read_request(orjson.dumps(chat_body()), CHAT, cache, PLAIN)
    return cache


def found(raw: bytes, known: KnownTools) -> Found | None:
    return known.find(raw, "chat", DEFAULT_MAX_JSON_DEPTH)


def full_read(raw: bytes) -> Any:
    body = parse_body(raw)
    check_messages(body)
    return request_of(body, ToolSetCache(), PLAIN, 100)


def tools_text(fragment: bytes) -> bytes:
    return orjson.dumps(chat_body(tools="@")).replace(b'"@"', fragment)


BODIES: dict[str, bytes] = {
    "compact": orjson.dumps(chat_body()),
    "spaced": json.dumps(chat_body(), separators=(",", ": ")).encode(),
    "tools first": orjson.dumps({"tools": TOOLS, **chat_body()}),
    "newlines around the colon": orjson.dumps(chat_body(tools="@")).replace(
        b'"tools":"@"', b'"tools"\n :\r\n\t' + HELD),
    "held list inside a message first": orjson.dumps(chat_body(messages=[
        {"role": "user", "content": "x", "tools": TOOLS}], tools=OTHER)),
    "held list inside a message, top-level null": orjson.dumps(chat_body(messages=[
        {"role": "user", "content": "x", "tools": TOOLS}], tools=None)),
    "top-level null, held list under another key": (
        b'{"tools": null, "metadata": {"tools": ' + HELD + b'}, '
        + orjson.dumps(chat_body())[1:].replace(b',"tools":' + HELD, b'')),
    "held first, another list last (last wins)": (
        b'{"tools": ' + HELD + b', ' + orjson.dumps(chat_body(tools=OTHER))[1:]),
    "escaped key for the real tools": (
        b'{"tool\\u0073": ' + orjson.dumps(OTHER) + b', "x": {"tools": ' + HELD + b'}, '
        + orjson.dumps(chat_body())[1:].replace(b',"tools":' + HELD, b'')),
    "held list inside a longer list": tools_text(b"[" + HELD + b"]"),
    "held list as a prefix of a longer value": tools_text(HELD[:-1] + b',{"a":1}]'),
    "held list then trailing garbage": orjson.dumps(chat_body()) + b" x",
    "held list inside a string": orjson.dumps(chat_body(
        tools=OTHER, metadata=HELD.decode())).replace(b'\\"', b'"'),
    "empty tools": orjson.dumps(chat_body(tools=[])),
    "no tools": orjson.dumps({k: v for k, v in chat_body().items() if k != "tools"}),
    "tool_calls in the conversation": orjson.dumps(chat_body(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "cancel_order", "arguments": "{not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "user", "content": "thanks"}])),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_a_warm_cache_reads_every_body_as_the_full_reading(name: str) -> None:
    raw = BODIES[name]
    try:
        full = full_read(raw)
    except BadRequest as refused:
        with pytest.raises(BadRequest) as caught:
            read_request(raw, CHAT, warm(), PLAIN)
        assert (str(caught.value), caught.value.param, caught.value.code) == (
            str(refused), refused.param, refused.code)
        return
    known = read_request(raw, CHAT, warm(), PLAIN)
    assert known.body == full.body == orjson.loads(raw)
    assert list(known.body) == list(full.body)  # every key in its place
    assert (known.model, known.stream, known.guarded) == (full.model, full.stream,
                                                           full.guarded)
    if full.rules is not None:
        assert known.rules is not None
        assert known.rules.toolset.digest == full.rules.toolset.digest
        assert known.rules.tool_choice == full.rules.tool_choice
    assert has_calls(raw, "chat", known.tools_span) == has_calls(raw, "chat") or \
        repaired(full.body, "chat") is None


def test_the_shortcut_takes_a_held_list_and_declines_the_decoys(fresh: KnownTools) -> None:
    cache = warm()
    for name in ("compact", "spaced", "tools first", "newlines around the colon"):
        read_request(BODIES[name], CHAT, cache, PLAIN)  # its spelling of the list, now held
        held = found(BODIES[name], fresh)
        assert held is not None, name
        fields, _, tools, at = held
        assert orjson.loads(tools) == TOOLS and fields["tools"] is None
        assert BODIES[name][at:at + len(tools)] == tools
    for name in ("held list inside a message first",
                 "held list inside a message, top-level null",
                 "top-level null, held list under another key",
                 "held first, another list last (last wins)",
                 "escaped key for the real tools", "held list inside a longer list",
                 "held list then trailing garbage"):
        assert found(BODIES[name], fresh) is None, name


def test_a_known_read_skips_the_tools_when_scanning_for_historical_calls() -> None:
    """A tools list with a "tool_calls" property holds no historical call: skipping it
    changes no outcome (the repair reads the conversation, never the tools)."""
    tools = [{"type": "function", "function": {"name": "explain", "parameters": {
        "type": "object", "properties": {"tool_calls": {"type": "string"}}}}}]
    raw = orjson.dumps(chat_body(tools=tools))
    cache = ToolSetCache()
    read_request(raw, CHAT, cache, PLAIN)
    chat = read_request(raw, CHAT, cache, PLAIN)
    assert chat.tools_span is not None
    assert has_calls(raw, "chat") and not has_calls(raw, "chat", chat.tools_span)
    assert repaired(chat.fields, "chat", chat.tools_raw) is None
    history = BODIES["tool_calls in the conversation"]
    read = read_request(history, CHAT, warm(), PLAIN)
    assert read.tools_span is not None and has_calls(history, "chat", read.tools_span)
    assert repaired(read.fields, "chat", read.tools_raw) is not None


def test_lists_sharing_their_leading_bytes_are_each_found(fresh: KnownTools) -> None:
    """Tool sets that differ only in a later tool share the looked-up prefix."""
    cache = ToolSetCache()
    first, second = TOOLS, [*TOOLS, *OTHER]
    assert orjson.dumps(first)[:KEY_PREFIX] == orjson.dumps(second)[:KEY_PREFIX]
    for tools in (first, second):
        read_request(orjson.dumps(chat_body(tools=tools)), CHAT, cache, PLAIN)
    for tools in (first, second, first):
        raw = orjson.dumps(chat_body(tools=tools))
        held = found(raw, fresh)
        assert held is not None and held[2] == orjson.dumps(tools)
        chat = read_request(raw, CHAT, cache, PLAIN)
        assert chat.rules is not None and chat.body == orjson.loads(raw)
        assert chat.rules.toolset.names == [t["function"]["name"] for t in tools]


def test_an_evicted_list_is_no_longer_found(monkeypatch: pytest.MonkeyPatch,
                                            fresh: KnownTools) -> None:
    monkeypatch.setattr(known_tools, "BYTES_BOUNDS", ShelfBounds(1, 1 << 20, 1 << 20))
    cache = ToolSetCache()
    read_request(orjson.dumps(chat_body()), CHAT, cache, PLAIN)
    assert found(orjson.dumps(chat_body()), fresh) is not None
    read_request(orjson.dumps(chat_body(tools=OTHER)), CHAT, cache, PLAIN)
    assert found(orjson.dumps(chat_body()), fresh) is None
    assert fresh.indexed() == fresh.held() == {("chat", orjson.dumps(OTHER))}


def test_requests_with_the_same_choice_share_their_rules_and_others_do_not() -> None:
    cache = ToolSetCache()
    auto = [read_request(orjson.dumps(chat_body()), CHAT, cache, PLAIN).rules for _ in range(2)]
    named = read_request(orjson.dumps(chat_body(tool_choice={
        "type": "function", "function": {"name": "cancel_order"}})), CHAT, cache, PLAIN).rules
    serial = read_request(orjson.dumps(chat_body(parallel_tool_calls=False)), CHAT, cache,
                          PLAIN).rules
    assert auto[0] is auto[1]
    assert named is not None and named.tool_choice.name == "cancel_order"
    assert serial is not None and serial.parallel_tool_calls is False
    assert auto[0] is not None and auto[0].tool_choice.mode == "auto"
    for n in range(100):  # a client's names are not kept without bound
        read_request(orjson.dumps(chat_body(tool_choice={
            "type": "function", "function": {"name": f"n{n}"}})), CHAT, cache, PLAIN)
    assert len(auto[0].toolset.rules) <= RULES_PER_TOOLSET
