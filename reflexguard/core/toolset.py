"""The cache of compiled tool sets, by the tools list's bytes and by its canonical digest.
Nothing here does I/O.

An agent sends the same tools every turn, so the cache's hit is the hot path: it costs one
serialisation of the parsed list and one dict lookup, whatever the schemas hold. Canonical
hashing and the walk for nesting depth happen once per distinct serialisation, on a miss
(docs/performance.md, "Tool lists"), and compiling (core/tool_compile.py) once per set.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import orjson

from reflexguard.core.limits import DEFAULT_MAX_SCHEMA_NODES
from reflexguard.core.tool_compile import compile_tools, nesting_depth
from reflexguard.core.tool_records import InvalidTools, InvalidToolSchema, ToolSet, ToolsTooDeep


class CompileNeeded(Exception):
    """A deferring cache's miss: the tools to compile off the loop (ToolSetCache)."""

    def __init__(self, key: bytes, tools: list[Any] | None, raw: bytes | None,
                 max_depth: int | None) -> None:
        super().__init__("tool set not compiled yet")
        self.key, self.tools, self.raw, self.max_depth = key, tools, raw, max_depth


def _fresh(exc: Exception) -> Exception:
    """A new exception like a cached refusal, with no traceback: raising the cached object
    itself again chained every request's frames (and their bodies) onto it."""
    clone = Exception.__new__(type(exc))
    clone.args = exc.args
    clone.__dict__.update(exc.__dict__)
    return clone


class ToolSetCache:
    """Compiled tool sets under two bounded LRUs: by the exact serialisation of the parsed
    list (the hot path), and by its canonical digest (key order ignored), which a miss
    falls back to, so tool lists that differ only in key order or whitespace share one
    compiled set. The exact key is the bytes themselves, compared in full on a hash match,
    so no collision can return another request's tools.

    With `defer`, a miss raises CompileNeeded instead of compiling: the HTTP edge runs
    `prepare` in a worker thread and `store`s its outcome, so a new tool set (2,000 tools:
    ~0.4 s) never blocks the event loop, and a hit costs what it did."""

    def __init__(self, capacity: int = 256, exact_key_bytes: int = 16 * 1024 * 1024,
                 max_schema_nodes: int = DEFAULT_MAX_SCHEMA_NODES,
                 defer: bool = False) -> None:
        self.max_schema_nodes = max_schema_nodes
        self.defer = defer
        # Outcomes other than a tool set (an empty list, a refusal), by exact key, so the
        # request that waited on `prepare` reads them as if compiled in place.
        self._settled: OrderedDict[bytes, Exception | None] = OrderedDict()
        self._handoff: tuple[bytes, ToolSet] | None = None  # the latest stored set
        self._capacity = capacity
        self._entries: OrderedDict[bytes, ToolSet] = OrderedDict()  # by canonical digest
        self._exact: OrderedDict[bytes, ToolSet] = OrderedDict()  # by serialisation
        self._exact_key_bytes = exact_key_bytes  # the exact keys' total size, bounded
        self._held_key_bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, tools: list[Any], max_depth: int | None = None) -> ToolSet:
        """The compiled set for `tools`; with `max_depth`, a list nesting deeper (the list
        itself being level 1) raises ToolsTooDeep and is never compiled."""
        try:
            key = orjson.dumps(tools)
        except TypeError as exc:  # integers beyond 64 bits; nesting beyond orjson's 254
            if max_depth is not None and nesting_depth(tools) > max_depth:
                raise ToolsTooDeep(max_depth) from None
            raise InvalidTools(f"tools cannot be serialised: {exc}") from None
        found = self._exact.get(key)
        if found is not None:
            self._exact.move_to_end(key)
            self.hits += 1
        elif self.defer and (found := self._deferred(key, tools, None, max_depth)):
            pass  # compiled off the loop just now (its depth checked there)
        else:
            found = self._canonical(tools, max_depth)
            self._remember(key, found)
        if max_depth is not None and found.depth > max_depth:
            raise ToolsTooDeep(max_depth)
        return found

    def get_serialised(self, raw: bytes, max_depth: int | None = None) -> ToolSet | None:
        """As `get`, for a tools list given as the bytes the client sent (None when they
        hold an empty list). A hit costs one dict lookup: the list is parsed only on a
        miss. Raises orjson.JSONDecodeError for bytes that are not JSON."""
        found = self._exact.get(raw)
        if found is None and self.defer:  # compiled off the loop just now, or settled
            return self._deferred(raw, None, raw, max_depth)
        if found is None:
            tools = orjson.loads(raw)
            if not isinstance(tools, list):
                raise InvalidTools("'tools' must be an array")
            if not tools:
                return None
            found = self.get(tools, max_depth)
            self._remember(raw, found)
            return found
        self._exact.move_to_end(raw)
        self.hits += 1
        if max_depth is not None and found.depth > max_depth:
            raise ToolsTooDeep(max_depth)
        return found

    def _deferred(self, key: bytes, tools: list[Any] | None, raw: bytes | None,
                  max_depth: int | None) -> ToolSet | None:
        """What `store` just kept for `key` (a tool set held by no LRU, being over the
        exact keys' bytes, still reaches the request that waited for it), a settled
        empty list (None); raises a settled refusal, or CompileNeeded."""
        if self._handoff is not None and self._handoff[0] == key:
            return self._handoff[1]
        if key in self._settled:
            outcome = self._settled[key]
            if outcome is None:
                return None
            raise _fresh(outcome)
        raise CompileNeeded(key, tools, raw, max_depth)

    def prepare(self, miss: CompileNeeded) -> tuple[bytes, ToolSet] | Exception | None:
        """What the miss compiles to, touching nothing this cache holds (safe in a worker
        thread): (canonical digest, tool set), the refusal to raise, or None (empty)."""
        scratch = ToolSetCache(capacity=1, max_schema_nodes=self.max_schema_nodes)
        try:
            if miss.raw is not None:
                found = scratch.get_serialised(miss.raw, miss.max_depth)
            else:
                assert miss.tools is not None
                found = scratch.get(miss.tools, miss.max_depth)
        except (InvalidTools, InvalidToolSchema, ToolsTooDeep, orjson.JSONDecodeError) as exc:
            return exc
        if found is None:
            return None
        return next(iter(scratch._entries)), found

    def store(self, miss: CompileNeeded,
              outcome: tuple[bytes, ToolSet] | Exception | None) -> None:
        """Keep what `prepare` made of `miss`, on the loop's thread."""
        self.misses += 1
        if outcome is None or isinstance(outcome, Exception):
            self._settled[miss.key] = outcome
            if len(self._settled) > self._capacity:
                self._settled.popitem(last=False)
            return
        digest, toolset = outcome
        toolset = self._entries.setdefault(digest, toolset)
        self._handoff = (miss.key, toolset)
        self._entries.move_to_end(digest)
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        self._remember(miss.key, toolset)

    def _canonical(self, tools: list[Any], max_depth: int | None) -> ToolSet:
        depth = nesting_depth(tools)
        if max_depth is not None and depth > max_depth:
            raise ToolsTooDeep(max_depth)  # before canonical hashing or compiling walk it
        digest = tool_set_digest(tools)
        cached = self._entries.get(digest)
        if cached is not None:
            self._entries.move_to_end(digest)
            self.hits += 1
            return cached
        self.misses += 1
        compiled = compile_tools(tools, digest.hex()[:16], depth, self.max_schema_nodes)
        self._entries[digest] = compiled
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return compiled

    def _remember(self, key: bytes, toolset: ToolSet) -> None:
        if len(key) > self._exact_key_bytes:
            return  # held by its digest only
        if key in self._exact:  # the client's bytes were already the compact form
            self._exact.move_to_end(key)
            return
        self._exact[key] = toolset
        self._held_key_bytes += len(key)
        while len(self._exact) > self._capacity or self._held_key_bytes > self._exact_key_bytes:
            evicted, _ = self._exact.popitem(last=False)
            self._held_key_bytes -= len(evicted)

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(compiled sets by digest, exact keys, the exact keys' bytes): what is held."""
        return len(self._entries), len(self._exact), self._held_key_bytes


def tool_set_digest(tools: list[Any]) -> bytes:
    """A 256-bit digest of the canonical form (keys sorted): strong enough that two tool
    sets sharing one cannot be found, so a hit needs no comparison."""
    try:
        canonical = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:  # integers beyond 64 bits and the like
        raise InvalidTools(f"tools cannot be serialised: {exc}") from None
    return hashlib.blake2b(canonical, digest_size=32).digest()
