"""Compiling a request's tools into validators, cached by a hash of the tool set.

Nothing here does I/O: remote `$ref`s are refused rather than fetched, because a
schema arriving in a request must never make the proxy open a connection.
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

    def errors(self, arguments: object) -> list[str]:
        """Human-readable schema errors, each with the path it concerns."""
        messages: list[str] = []
        for error in self.validator.iter_errors(arguments):
            path = "/".join(str(p) for p in error.instance_path)
            messages.append(f"{path or '(root)'}: {error.message}")
        return messages


@dataclass(frozen=True)
class ToolSet:
    digest: str
    specs: dict[str, ToolSpec]
    schema_text: str = field(repr=False)  # descriptions and examples, for grounding

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


def _compile(tools: list[Any], digest: str) -> ToolSet:
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
    return ToolSet(digest=digest, specs=specs, schema_text=schema_text)


class ToolSetCache:
    """A bounded LRU of compiled tool sets: an agent sends the same tools every turn."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, ToolSet] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, tools: list[Any]) -> ToolSet:
        digest = tool_set_digest(tools)
        cached = self._entries.get(digest)
        if cached is not None:
            self._entries.move_to_end(digest)
            self.hits += 1
            return cached
        self.misses += 1
        compiled = _compile(tools, digest)
        self._entries[digest] = compiled
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return compiled


def tool_set_digest(tools: list[Any]) -> str:
    try:
        canonical = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:  # integers beyond 64 bits and the like
        raise InvalidTools(f"tools cannot be serialised: {exc}") from None
    return hashlib.blake2b(canonical, digest_size=8).hexdigest()
