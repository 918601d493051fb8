"""Compiling a request's tools into validators, cached by the tool set.

Nothing here does I/O: remote `$ref`s are refused rather than fetched, because a
schema arriving in a request must never make the proxy open a connection.

An agent sends the same tools every turn, so the cache's hit is the hot path: it costs one
serialisation of the parsed list and one dict lookup, whatever the schemas hold. Canonical
hashing and the walk for nesting depth happen once per distinct serialisation, on a miss
(docs/performance.md, "Tool lists").
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import jsonschema_rs
import orjson

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class InvalidToolSchema(ValueError):
    """A tool in the request whose `parameters` is not a usable JSON Schema."""

    def __init__(self, tool_name: str, index: int, reason: str) -> None:
        super().__init__(f"tool {tool_name!r} has invalid parameters: {reason}")
        self.tool_name = tool_name
        self.param = f"tools[{index}].function.parameters"


class ToolsTooDeep(ValueError):
    """The tools list nests deeper than the caller allows."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"tools nest deeper than {limit} levels")
        self.limit = limit


class InvalidTools(ValueError):
    """`tools` is not a list of function tools."""

    def __init__(self, reason: str, param: str = "tools") -> None:
        super().__init__(reason)
        self.param = param


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: dict[str, Any]
    validator: Any  # a compiled jsonschema_rs validator

    def accepts(self, arguments: object) -> bool:
        """Whether the arguments fit, without building error messages; a validator fault
        is a no (the caller then reads the call in full, which records the fault)."""
        try:
            return bool(self.validator.is_valid(arguments))
        except Exception:  # the library raises several types; never the model's fault
            return False

    def errors(self, arguments: object) -> list[str]:
        """Human-readable schema errors, each with the path it concerns."""
        messages: list[str] = []
        for error in self.validator.iter_errors(arguments):
            path = "/".join(str(p) for p in error.instance_path)
            messages.append(f"{path or '(root)'}: {error.message}")
        return messages


@dataclass(frozen=True)
class ToolSet:
    digest: str  # an id for logs and events: the canonical digest's first 64 bits
    specs: dict[str, ToolSpec]
    schema_text: str = field(repr=False)  # descriptions and examples, for grounding
    depth: int = 1  # how deep the tools list nests, the list itself being level 1

    @property
    def names(self) -> list[str]:
        return list(self.specs)

    def get(self, name: str) -> ToolSpec | None:
        return self.specs.get(name)


def _refuse_remote(uri: str) -> Any:
    raise ValueError(f"remote reference {uri!r} is not fetched")


# The metaschemas every validator ships. Claude Code puts the 2020-12 URI on every tool,
# so refusing `$schema` outright would refuse every Claude Code request.
_WELL_KNOWN_METASCHEMAS = {
    "json-schema.org/draft-04/schema": "http://json-schema.org/draft-04/schema#",
    "json-schema.org/draft-06/schema": "http://json-schema.org/draft-06/schema#",
    "json-schema.org/draft-07/schema": "http://json-schema.org/draft-07/schema#",
    "json-schema.org/draft/2019-09/schema": "https://json-schema.org/draft/2019-09/schema",
    "json-schema.org/draft/2020-12/schema": "https://json-schema.org/draft/2020-12/schema",
}


def _local_metaschema(parameters: dict[str, Any], name: str, index: int) -> dict[str, Any]:
    """`parameters` with a well-known `$schema` in the spelling the validator resolves
    locally; any other `$schema` is refused, since validating against it means fetching."""
    declared = parameters.get("$schema")
    if declared is None:
        return parameters
    if not isinstance(declared, str):
        raise InvalidToolSchema(name, index, "$schema must be a string")
    key = declared.strip().removesuffix("#").removeprefix("https://").removeprefix("http://")
    canonical = _WELL_KNOWN_METASCHEMAS.get(key)
    if canonical is None:
        raise InvalidToolSchema(
            name, index, f"$schema {declared[:200]!r} is not a well-known metaschema; "
            "reflexguard never fetches schemas")
    return parameters if declared == canonical else {**parameters, "$schema": canonical}


def nesting_depth(value: object) -> int:
    """How many containers deep parsed JSON nests (a scalar: 0). Iterative."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return deepest


def _compile(tools: list[Any], digest: str, depth: int) -> ToolSet:
    specs: dict[str, ToolSpec] = {}
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InvalidTools(f"tools[{index}] is not an object", f"tools[{index}]")
        if tool.get("type", "function") != "function":
            continue  # non-function tools are not ours to validate
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidTools(f"tools[{index}].function.name is missing", f"tools[{index}]")
        name = function["name"]
        if name in specs:
            raise InvalidTools(f"tool name {name!r} is offered twice", f"tools[{index}]")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = EMPTY_PARAMETERS
        if not isinstance(parameters, dict):
            raise InvalidToolSchema(name, index, "parameters must be a JSON object")
        checked = _local_metaschema(parameters, name, index)
        try:
            jsonschema_rs.meta.validate(checked)
            validator = jsonschema_rs.validator_for(checked, retriever=_refuse_remote)
        except Exception as exc:  # the library raises several types for bad schemas
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InvalidToolSchema(name, index, reason) from None
        specs[name] = ToolSpec(name=name, parameters=parameters, validator=validator)
    schema_text = orjson.dumps(tools).decode().casefold()
    return ToolSet(digest=digest, specs=specs, schema_text=schema_text, depth=depth)


class ToolSetCache:
    """Compiled tool sets under two bounded LRUs: by the exact serialisation of the parsed
    list (the hot path), and by its canonical digest (key order ignored), which a miss
    falls back to, so tool lists that differ only in key order or whitespace share one
    compiled set. The exact key is the bytes themselves, compared in full on a hash match,
    so no collision can return another request's tools."""

    def __init__(self, capacity: int = 256, exact_key_bytes: int = 16 * 1024 * 1024) -> None:
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
        if found is None:
            found = self._canonical(tools, max_depth)
            self._remember(key, found)
        else:
            self._exact.move_to_end(key)
            self.hits += 1
        if max_depth is not None and found.depth > max_depth:
            raise ToolsTooDeep(max_depth)
        return found

    def get_serialised(self, raw: bytes, max_depth: int | None = None) -> ToolSet | None:
        """As `get`, for a tools list given as the bytes the client sent (None when they
        hold an empty list). A hit costs one dict lookup: the list is parsed only on a
        miss. Raises orjson.JSONDecodeError for bytes that are not JSON."""
        found = self._exact.get(raw)
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
        compiled = _compile(tools, digest.hex()[:16], depth)
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
