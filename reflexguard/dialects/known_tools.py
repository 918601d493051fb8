"""The one cache of tools lists seen before, for every dialect, and finding one in a body.
Nothing here does I/O.

An agent sends the same tools every turn and they are most of its request, so a list seen
before is neither scanned for, parsed, checked, translated nor looked up by its JSON
again; only the rest of the body is (issue 23). `find` locates a held list right after
the body's first `"tools":` by its leading bytes, compares it byte for byte, and parses
the rest around a stand-in that must come back as the body's own `tools`; `get` takes the
list's bytes from a split of the body (dialects/chat_request.split_tools) where that
declined. What a list reads as is the reader's (dialects/reader.py): this file holds it.

A list is held in one of two forms (`Known`): as its bytes only, where they are the chat
view's own list and the ToolSetCache's key (chat), or with the parsed native list, its
chat view and the rules its full reading made (Messages, Responses). Each dialect has a
shelf of its own, bounded in lists and bytes, least recently used dropped first.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from reflexguard.core.errors import BadRequest
from reflexguard.core.model import JsonObject
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules
from reflexguard.dialects.chat_request import parse_body

# The leading bytes of a held list by which `find` looks for it, and how many held lists
# sharing them it compares (tool sets that differ in a later tool share them).
KEY_PREFIX = 48
LISTS_PER_PREFIX = 8


@dataclass(frozen=True)
class ShelfBounds:
    lists: int
    list_bytes: int  # a longer list is read in full each time
    total_bytes: int


# A parsed native list is held as Python objects: 16 lists of at most 128 KiB, 2 MiB.
PARSED_BOUNDS = ShelfBounds(lists=16, list_bytes=128 * 1024, total_bytes=2 * 1024 * 1024)
# Bytes only (chat): the ToolSetCache's own bounds on its exact keys, which these bytes
# are while it holds them (core/toolset.py).
BYTES_BOUNDS = ShelfBounds(lists=256, list_bytes=16 * 1024 * 1024,
                           total_bytes=16 * 1024 * 1024)


@dataclass(frozen=True)
class Known:
    """What a tools list reads as, kept from its first reading. The lists are shared by
    every request that sends the same bytes, as the compiled ToolSet is: nothing in
    reflexguard writes into a request body or its chat view (docs/decisions.md)."""

    tools: list[Any] | None  # the native list, as parsed; None: held as its bytes (chat)
    chat_tools: list[Any] | None  # the chat view's list (None: no client tool)
    dropped: tuple[str, ...]  # its `tool:<name>` entries of `dropped`
    # The rules the full reading made (their ToolSet compiled by `cache`): a later request
    # read with the same cache takes the set from them instead of serialising the chat
    # list again to look it up (another app's cache, whose limits may differ, looks it up).
    rules: CallRules | None
    cache: ToolSetCache | None


AS_BYTES = Known(None, None, (), None, None)  # a chat list: the cache reads its bytes

# What a known list is replaced with before the rest is parsed: a string no client can
# send but by guessing 128 random bits, so finding it as the body's own `tools` value
# proves the list stood there (not in a message, not under a key orjson reads before a
# later `tools`), whatever else the body holds.
_STAND_IN = f"\x00reflexguard-tools-{secrets.token_hex(16)}"
_STAND_IN_JSON = orjson.dumps(_STAND_IN)
TOOLS_KEY = b'"tools"'
JSON_SPACE = b" \t\n\r"

# (the body parsed with null for its tools, what they read as, their bytes, where they begin)
Found = tuple[JsonObject, Known, bytes, int]


class _Shelf:
    def __init__(self, bounds: ShelfBounds) -> None:
        self.bounds = bounds
        self.entries: OrderedDict[tuple[int, bytes], Known] = OrderedDict()  # (depth, list)
        self.held_bytes = 0


class KnownTools:
    """Tools lists seen before, by dialect, depth limit and the list's bytes. A list is
    learned only from a request its reading accepted, and any doubt on a later one (its
    rest not parsing, an error, a `tools` the split did not stand for) sends it back to
    that reading, which then says what is wrong in its own words."""

    def __init__(self) -> None:
        self._shelves: dict[str, _Shelf] = {}
        # (dialect, the first KEY_PREFIX bytes) -> the lists held that begin so, latest first
        self._by_prefix: dict[tuple[str, bytes], list[bytes]] = {}

    def find(self, raw: bytes, dialect: str, max_depth: int) -> Found | None:
        """The body around its tools, when its first `"tools":` is followed by a list held
        here; else None (nothing is refused here: the split or the full reading reads it)."""
        at = tools_value_at(raw)
        if at is None:
            return None
        for tools in self._by_prefix.get((dialect, raw[at:at + KEY_PREFIX]), ()):
            if raw.startswith(tools, at):
                break
        else:
            return None
        shelf = self._shelves[dialect]
        known = shelf.entries.get((max_depth, tools))
        if known is None:  # learned under another depth limit
            return None
        fields = fields_around(raw, at, tools, max_depth)
        if fields is None:
            return None
        shelf.entries.move_to_end((max_depth, tools))
        return fields, known, tools, at

    def get(self, dialect: str, max_depth: int, tools: bytes) -> Known | None:
        """What the list `tools` (a split's bytes) reads as, if held."""
        shelf = self._shelves.get(dialect)
        if shelf is None:
            return None
        known = shelf.entries.get((max_depth, tools))
        if known is not None:
            shelf.entries.move_to_end((max_depth, tools))
        return known

    def fits(self, tools: bytes, known: Known) -> bool:
        """Whether a list this long may be held in `known`'s form."""
        bounds = BYTES_BOUNDS if known.tools is None else PARSED_BOUNDS
        return len(tools) <= bounds.list_bytes

    def learn(self, dialect: str, max_depth: int, tools: bytes, known: Known) -> None:
        if not self.fits(tools, known):
            return
        shelf = self._shelves.get(dialect)
        if shelf is None:
            bounds = BYTES_BOUNDS if known.tools is None else PARSED_BOUNDS
            shelf = self._shelves[dialect] = _Shelf(bounds)
        sharing = self._by_prefix.setdefault((dialect, tools[:KEY_PREFIX]), [])
        if tools not in sharing:
            sharing.insert(0, tools)
            del sharing[LISTS_PER_PREFIX:]  # still held: found by the split
        if (max_depth, tools) not in shelf.entries:
            shelf.held_bytes += len(tools)
        shelf.entries[(max_depth, tools)] = known
        while (len(shelf.entries) > shelf.bounds.lists
               or shelf.held_bytes > shelf.bounds.total_bytes):
            (_, evicted), _ = shelf.entries.popitem(last=False)
            shelf.held_bytes -= len(evicted)
            if not any(t == evicted for _, t in shelf.entries):  # held under other depths
                self._forget_prefix(dialect, evicted)

    def _forget_prefix(self, dialect: str, tools: bytes) -> None:
        prefix = (dialect, tools[:KEY_PREFIX])
        sharing = self._by_prefix.get(prefix, [])
        if tools in sharing:
            sharing.remove(tools)
        if not sharing:
            self._by_prefix.pop(prefix, None)

    def held(self) -> set[tuple[str, bytes]]:
        """(dialect, list) of every list held, under any depth limit."""
        return {(name, tools) for name, shelf in self._shelves.items()
                for _, tools in shelf.entries}

    def indexed(self) -> set[tuple[str, bytes]]:
        """(dialect, list) of every list `find` can reach."""
        return {(name, tools) for (name, _), lists in self._by_prefix.items()
                for tools in lists}


KNOWN_TOOLS = KnownTools()  # one per process, as the ToolSetCache is one per app


def tools_value_at(raw: bytes) -> int | None:
    """Where the value of the body's first `"tools"` begins (past its colon and any JSON
    whitespace); None when that first `"tools"` is followed by no colon (not a key)."""
    key = raw.find(TOOLS_KEY)
    if key < 0:
        return None
    at = key + len(TOOLS_KEY)
    while at < len(raw) and raw[at] in JSON_SPACE:
        at += 1
    if raw[at:at + 1] != b":":
        return None
    at += 1
    while at < len(raw) and raw[at] in JSON_SPACE:
        at += 1
    return at


def fields_around(raw: bytes, at: int, tools: bytes, max_depth: int) -> JsonObject | None:
    """The body parsed and depth-checked with the `tools` bytes at `at` replaced by the
    stand-in, null in their place; None unless the stand-in came back as the body's own
    `tools` value (then the list stood there) or when the rest does not parse."""
    try:
        fields = parse_body(raw[:at] + _STAND_IN_JSON + raw[at + len(tools):], max_depth)
    except BadRequest:
        return None
    if fields.get("tools") != _STAND_IN:
        return None
    fields["tools"] = None
    return fields
