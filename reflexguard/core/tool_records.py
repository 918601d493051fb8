"""A compiled tool set: its tools' validators, and the errors a tools list can be refused
with. Nothing here does I/O.

Made by core/tool_compile.py, cached by core/toolset.py; read by validation, repair and
every dialect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import jsonschema_rs

from reflexguard.core.limits import ERROR_DETAIL_BUDGET, ERROR_MESSAGE_LIMIT, clip

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


