"""Reading a chat request with its tools list split off the client's bytes.

`read_request` looks the tool set up by the tools list's own bytes and parses the rest
(dialects/reader.py, with chat_request.py's `split_tools`). Whatever the body, it must read
as the full parse reads it: the same body, the same tool set and rules, the same errors.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from reflexguard.core.errors import BadRequest
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects.chat_request import (
    CHAT,
    GroundingPolicy,
    check_messages,
    parse_body,
    request_of,
    split_tools,
)
from reflexguard.dialects.reader import read_request
from tests.conftest import TOOLS, chat_body

PLAIN = GroundingPolicy()


def full_read(raw: bytes) -> Any:
    """The reading without the split: parse everything, then the same checks."""
    body = parse_body(raw)
    check_messages(body)
    return request_of(body, ToolSetCache(), PLAIN, 100)


def dumped(body: dict[str, Any], **options: Any) -> bytes:
    return json.dumps(body, **options).encode()


BODIES: dict[str, bytes] = {
    "compact": orjson.dumps(chat_body()),
    "spaced": dumped(chat_body(), indent=2),
    "tools first": orjson.dumps({"tools": TOOLS, **chat_body()}),
    "tools repeated in another field": orjson.dumps({**chat_body(), "metadata": {"t": TOOLS}}),
    "tools key twice (last wins)": (b'{"tools": [{"type": "function", "function": {"name": '
                                    b'"old"}}], ' + orjson.dumps(chat_body())[1:]),
    "empty tools": orjson.dumps(chat_body(tools=[])),
    "empty tools, spaced": orjson.dumps(chat_body(tools=[])).replace(b"[]", b"[ ]"),
    "named tool choice": orjson.dumps(chat_body(tool_choice={
        "type": "function", "function": {"name": "cancel_order"}}, parallel_tool_calls=False)),
    "a tools key inside a message": orjson.dumps(chat_body(messages=[
        {"role": "user", "content": '"tools": [1]', "tools": [1]}])),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_the_split_reading_equals_the_full_reading(name: str) -> None:
    raw = BODIES[name]
    split, full = read_request(raw, CHAT, ToolSetCache(), PLAIN), full_read(raw)
    assert split.body == full.body == orjson.loads(raw)
    assert (split.model, split.stream, split.guarded) == (full.model, full.stream, full.guarded)
    if full.rules is not None:
        assert split.rules is not None
        assert split.rules.toolset.digest == full.rules.toolset.digest
        assert split.rules.tool_choice == full.rules.tool_choice
        assert split.rules.parallel_tool_calls == full.rules.parallel_tool_calls


def test_a_split_request_parses_its_tools_only_when_the_body_is_asked_for() -> None:
    raw = BODIES["spaced"]
    chat = read_request(raw, CHAT, ToolSetCache(), PLAIN)
    assert chat.tools_raw is not None and chat.fields["tools"] is None
    assert list(chat.body) == list(orjson.loads(raw))  # the tools in their own place
    assert chat.body["tools"] == TOOLS and chat.fields["tools"] is None


def test_a_list_its_prefix_repeats_is_not_split() -> None:
    assert split_tools(BODIES["tools repeated in another field"]) is None
    assert split_tools(BODIES["compact"]) is not None


def test_the_tool_set_is_found_by_the_clients_bytes_and_shared_across_spellings() -> None:
    cache = ToolSetCache()
    first = read_request(BODIES["compact"], CHAT, cache, PLAIN)
    second = read_request(BODIES["spaced"], CHAT, cache, PLAIN)
    assert first.rules is not None and second.rules is not None
    assert first.rules.toolset is second.rules.toolset
    assert cache.misses == 1


ERRORS: dict[str, tuple[bytes, str]] = {
    "tools not a list": (orjson.dumps(chat_body(tools={"a": 1})), "'tools' must be an array"),
    "tools a string": (orjson.dumps(chat_body(tools="x")), "'tools' must be an array"),
    "bad UTF-8 inside the tools": (
        orjson.dumps(chat_body()).replace(b"Get an order", b"Get an \xff order"),
        "request body is not valid JSON"),
    "a tool without a name": (orjson.dumps(chat_body(tools=[{"type": "function"}])), "tools[0]"),
    "messages missing": (orjson.dumps({"model": "m", "tools": TOOLS}), "'messages' is a required"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_the_split_reading_refuses_what_the_full_reading_refuses(name: str) -> None:
    raw, words = ERRORS[name]
    with pytest.raises(BadRequest) as split:
        read_request(raw, CHAT, ToolSetCache(), PLAIN)
    with pytest.raises(BadRequest) as full:
        full_read(raw)
    assert words in str(split.value)
    assert (str(split.value), split.value.param, split.value.code) == (
        str(full.value), full.value.param, full.value.code)


def test_depth_is_still_checked_outside_the_tools() -> None:
    deep: Any = "x"
    for _ in range(120):
        deep = [deep]
    raw = orjson.dumps(chat_body(metadata=deep))
    assert split_tools(raw) is not None
    with pytest.raises(BadRequest) as caught:
        read_request(raw, CHAT, ToolSetCache(), PLAIN, 100)
    assert caught.value.code == "nesting_too_deep"
