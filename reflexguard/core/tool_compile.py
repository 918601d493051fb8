"""Compiling a tools list into validators, within the schema budget. Nothing here does I/O:
remote `$ref`s are refused rather than fetched, because a schema arriving in a request
must never make the proxy open a connection.

Each schema's cost is measured and its patterns checked before its validator is built
(core/schema_cost.py): a schema's cost is decided here, where the client still gets a
clear 400, never while validating a model's answer. Called on a cache miss only
(core/toolset.py).
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import orjson

from reflexguard.core.limits import DEFAULT_MAX_SCHEMA_NODES, PATTERN_BACKTRACK_LIMIT, clip
from reflexguard.core.schema_cost import (
    SchemaTooCostly,
    schema_cost,
    schema_patterns,
    unbounded_lookbehind,
)
from reflexguard.core.tool_records import InvalidTools, InvalidToolSchema, ToolSet, ToolSpec

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
# fancy-regex hands patterns without lookaround or backreferences to the linear-time
# regex crate whole; the rest run under this backtracking limit (docs/decisions.md).
PATTERN_OPTIONS = jsonschema_rs.FancyRegexOptions(backtrack_limit=PATTERN_BACKTRACK_LIMIT)


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


def compile_tools(tools: list[Any], digest: str, depth: int,
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


