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
from itertools import islice
from typing import Any

import jsonschema_rs
import orjson

from reflexguard.core.limits import (
    DEFAULT_MAX_SCHEMA_NODES,
    ERROR_DETAIL_BUDGET,
    ERROR_MESSAGE_LIMIT,
    PATTERN_BACKTRACK_LIMIT,
    clip,
)
from reflexguard.core.schema_cost import (
    SchemaTooCostly,
    schema_cost,
    schema_patterns,
    unbounded_lookbehind,
)

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
# The leading bytes of a held tools list by which `known_lists` finds it, and how many
# lists sharing them are kept there (tool sets that differ in a later tool share them).
KEY_PREFIX = 48
KEYS_PER_PREFIX = 8
# fancy-regex hands patterns without lookaround or backreferences to the linear-time
# regex crate whole; the rest run under this backtracking limit (docs/decisions.md).
PATTERN_OPTIONS = jsonschema_rs.FancyRegexOptions(backtrack_limit=PATTERN_BACKTRACK_LIMIT)
_REGEX_FAULT = "Error executing regex"  # jsonschema-rs's message when a limit is hit


class InvalidToolSchema(ValueError):
    """A tool in the request whose `parameters` is not a usable JSON Schema."""

    def __init__(self, tool_name: str, index: int, reason: str) -> None:
        super().__init__(f"tool {tool_name!r} has invalid parameters: {reason}")
        self.tool_name = tool_name
        self.param = f"tools[{index}].function.parameters"


class PatternUnevaluable(RuntimeError):
    """A `pattern` that could not be evaluated within its limit: the validator's fault,
    never the model's (validate.py records it as validator_error)."""


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
    cost: int = 1  # expanded schema nodes (core/schema_cost.py)
    fanout: int = 0  # its widest anyOf/oneOf, expanded: what building that error costs
    backtracking: bool = False  # a pattern needs fancy-regex's backtracking (may fault)

    def accepts(self, arguments: object) -> bool:
        """Whether the arguments fit, without building error messages; a validator fault
        is a no (the caller then reads the call in full, which records the fault)."""
        try:
            return bool(self.validator.is_valid(arguments))
        except Exception:  # the library raises several types; never the model's fault
            return False

    def errors(self, arguments: object) -> list[str]:
        """The first schema error, with the path it concerns; [] when the arguments fit.

        Validity first: `is_valid` stops at the first failure. Then one message, from
        `validate`, which also stops at the first: jsonschema-rs 0.60's `iter_errors`
        builds every error before it yields one (2,000 wrong items of a 20,000-value enum:
        12 s for the first), so even `islice` over it is not lazy. Building the message
        is bounded too: an anyOf/oneOf's error carries every branch's errors, so when
        (its widest one's size) x (values in the arguments) passes ERROR_DETAIL_BUDGET,
        the message says only that the arguments do not fit.
        Raises PatternUnevaluable when a pattern's backtracking limit was hit."""
        if self.validator.is_valid(arguments):
            return []
        if self.fanout and self.fanout * _values(arguments, ERROR_DETAIL_BUDGET) \
                > ERROR_DETAIL_BUDGET:
            if self.backtracking:  # a pattern may have hit its limit: we cannot tell
                raise PatternUnevaluable(f"{self.name}: no detail within the budget")
            return [f"(root): the arguments do not match the schema of {self.name!r}"]
        try:
            self.validator.validate(arguments)
        except jsonschema_rs.ValidationError as error:
            if error.message.startswith(_REGEX_FAULT):
                raise PatternUnevaluable(f"{self.name}: {error.message}") from None
            path = "/".join(str(p) for p in islice(error.instance_path, 20))
            return [f"{clip(path, 200) or '(root)'}: {clip(error.message, ERROR_MESSAGE_LIMIT)}"]
        return []  # is_valid and validate disagreed: trust the one that says it fits


@dataclass(frozen=True)
class ToolSet:
    digest: str  # an id for logs and events: the canonical digest's first 64 bits
    specs: dict[str, ToolSpec]
    schema_text: str = field(repr=False)  # descriptions and examples, for grounding
    depth: int = 1  # how deep the tools list nests, the list itself being level 1
    # The request rules (validate.CallRules) made over this set, by tool choice and
    # parallel_tool_calls, shared by the requests that send the same (chat_request.py):
    # they live as long as the set does.
    rules: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def names(self) -> list[str]:
        return list(self.specs)

    def get(self, name: str) -> ToolSpec | None:
        return self.specs.get(name)


def _values(value: object, limit: int) -> int:
    """How many JSON values `value` holds, counting stopped past `limit`."""
    count = 0
    stack: list[object] = [value]
    while stack and count <= limit:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


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


def _spec(name: str, index: int, parameters: dict[str, Any], max_nodes: int) -> ToolSpec:
    """One tool's validator, its cost measured and its patterns checked before it is
    built (the validator would compile a 2^40 schema happily and wedge on its use)."""
    checked = _local_metaschema(parameters, name, index)
    try:
        jsonschema_rs.meta.validate(checked)
    except Exception as exc:  # the library raises several types for bad schemas
        raise InvalidToolSchema(name, index, _first_line(exc)) from None
    try:
        cost, fanout = schema_cost(checked, max_nodes)
        backtracking = False
        for pattern in schema_patterns(checked, 8 * max_nodes):
            if unbounded_lookbehind(pattern):
                raise SchemaTooCostly(
                    f"its pattern {clip(pattern, 80)!r} has a lookbehind over an unbounded "
                    "repetition, whose cost grows with the square of the argument's length")
            backtracking = backtracking or not _linear(pattern)
    except SchemaTooCostly as exc:
        raise InvalidToolSchema(name, index, str(exc)) from None
    except RecursionError:  # a $ref chain longer than the interpreter's stack: flat JSON
        raise InvalidToolSchema(name, index, "its $ref chain is too long to measure") from None
    try:
        validator = jsonschema_rs.validator_for(
            checked, retriever=_refuse_remote, pattern_options=PATTERN_OPTIONS)
    except Exception as exc:  # the library raises several types for bad schemas
        raise InvalidToolSchema(name, index, _first_line(exc)) from None
    return ToolSpec(name=name, parameters=parameters, validator=validator, cost=cost,
                    fanout=fanout, backtracking=backtracking)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _linear(pattern: str) -> bool:
    """Whether the linear-time regex crate takes `pattern` (no lookaround, no
    backreference), so no backtracking limit can be hit while evaluating it."""
    try:
        jsonschema_rs.validator_for({"pattern": pattern},
                                    pattern_options=jsonschema_rs.RegexOptions())
    except Exception:  # not a regex for that engine: a backtracking one
        return False
    return True


def _compile(tools: list[Any], digest: str, depth: int,
             max_nodes: int = DEFAULT_MAX_SCHEMA_NODES) -> ToolSet:
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
        specs[name] = _spec(name, index, parameters, max_nodes)
    schema_text = orjson.dumps(tools).decode().casefold()
    return ToolSet(digest=digest, specs=specs, schema_text=schema_text, depth=depth)


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
        # The exact keys by their first KEY_PREFIX bytes, the latest remembered first.
        self._by_prefix: dict[bytes, list[bytes]] = {}
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

    def known_lists(self, prefix: bytes) -> list[bytes]:
        """The exact keys held (tools lists, as bytes a client sent or their compact form)
        that begin with `prefix`, their first KEY_PREFIX bytes: read_request looks for one
        of these in a body instead of scanning the body for its list (chat_request.py)."""
        return self._by_prefix.get(prefix, [])

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
        compiled = _compile(tools, digest.hex()[:16], depth, self.max_schema_nodes)
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
        sharing = self._by_prefix.setdefault(key[:KEY_PREFIX], [])
        sharing.insert(0, key)
        del sharing[KEYS_PER_PREFIX:]  # still held by `_exact`, found by the full split
        while len(self._exact) > self._capacity or self._held_key_bytes > self._exact_key_bytes:
            evicted, _ = self._exact.popitem(last=False)
            self._held_key_bytes -= len(evicted)
            self._forget_prefix(evicted)

    def _forget_prefix(self, key: bytes) -> None:
        sharing = self._by_prefix.get(key[:KEY_PREFIX])
        if sharing is None:
            return
        if key in sharing:
            sharing.remove(key)
        if not sharing:
            del self._by_prefix[key[:KEY_PREFIX]]

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
