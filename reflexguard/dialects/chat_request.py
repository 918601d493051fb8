"""Reading an incoming chat-completion request. Nothing here does I/O.

Only the envelope is checked (a JSON object with a list of messages that have roles)
and the tools compiled; every other field is forwarded as the client sent it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from reflexguard.core.errors import BadRequest
from reflexguard.core.grounding import collect_sources
from reflexguard.core.limits import (
    DEFAULT_MAX_JSON_DEPTH,
    depth_exceeds,
    nesting_could_exceed,
    safe_label,
)
from reflexguard.core.model import JsonObject, ToolChoice
from reflexguard.core.toolset import InvalidTools, InvalidToolSchema, ToolSetCache, ToolsTooDeep
from reflexguard.core.validate import CallRules


@dataclass(frozen=True)
class GroundingPolicy:
    """When set, identifier-like arguments must be grounded in the conversation."""

    pattern: re.Pattern[str] | None = None  # None: the ungrounded_entity check is off
    include_system: bool = False


@dataclass(frozen=True)
class ChatRequest:
    body: JsonObject
    model: str
    stream: bool
    rules: CallRules | None  # None when the request offers no tools: nothing to guard

    @property
    def guarded(self) -> bool:
        return self.rules is not None


def parse_body(raw: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH,
               tools_checked_later: bool = False) -> JsonObject:
    """The body as a JSON object nesting at most `max_depth` levels. With
    `tools_checked_later`, a `tools` list is left to the tool-set cache, which knows the
    depth of a list it has seen (request_of's `max_depth`): walking 10 KB of schemas on
    every request cost more than parsing them."""
    try:
        body: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if nesting_could_exceed(raw, max_depth) and _nests_deeper(body, max_depth,
                                                              tools_checked_later):
        raise _too_deep(max_depth)
    return body


def _nests_deeper(body: JsonObject, max_depth: int, skip_tools: bool) -> bool:
    if not skip_tools or not isinstance(body.get("tools"), list):
        return depth_exceeds(body, max_depth)
    # A member's own depth is one less than its depth in the body.
    return any(depth_exceeds(value, max_depth - 1) for key, value in body.items()
               if key != "tools")


def _too_deep(max_depth: int) -> BadRequest:
    return BadRequest(f"request body nests deeper than {max_depth} levels",
                      code="nesting_too_deep")


def _check_messages(body: JsonObject) -> None:
    messages = body.get("messages")
    if messages is None:
        raise BadRequest("'messages' is a required property", param="messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(
                f"messages[{index}] must be an object with a string 'role'",
                param=f"messages[{index}]",
            )


def read_request(raw: bytes, cache: ToolSetCache, grounding: GroundingPolicy,
                 max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> ChatRequest:
    body = parse_body(raw, max_depth, tools_checked_later=True)
    _check_messages(body)
    return request_of(body, cache, grounding, max_depth)


def request_of(body: JsonObject, cache: ToolSetCache, grounding: GroundingPolicy,
               max_depth: int | None = None) -> ChatRequest:
    """A parsed chat body whose envelope was checked (here, or by a dialect translating its
    own request into this view). `max_depth`: the body's limit, for the tools that
    `parse_body(..., tools_checked_later=True)` left unchecked."""
    stream_flag = body.get("stream", False)
    if not isinstance(stream_flag, bool) and stream_flag is not None:
        raise BadRequest("'stream' must be a boolean", param="stream")
    # The model name reaches metric labels, logs and events: bounded there, not upstream.
    model = safe_label(body["model"]) if isinstance(body.get("model"), str) else ""
    stream = stream_flag is True
    tools = body.get("tools")
    if tools is None or tools == []:
        return ChatRequest(body, str(model), stream, None)
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be an array", param="tools")
    try:
        toolset = cache.get(tools, None if max_depth is None else max_depth - 1)
    except ToolsTooDeep:
        raise _too_deep(max_depth or 0) from None
    except InvalidToolSchema as exc:
        raise BadRequest(str(exc), param=exc.param, code="invalid_tool_schema") from None
    except InvalidTools as exc:
        raise BadRequest(str(exc), param=exc.param) from None
    parallel = body.get("parallel_tool_calls") is not False
    rules = CallRules(
        toolset=toolset,
        tool_choice=ToolChoice.parse(body.get("tool_choice")),
        parallel_tool_calls=parallel,
    )
    if grounding.pattern is not None:
        rules = CallRules(
            toolset=toolset,
            tool_choice=rules.tool_choice,
            parallel_tool_calls=parallel,
            grounding=collect_sources(body["messages"], grounding.include_system),
            identifier_pattern=grounding.pattern,
        )
    return ChatRequest(body, str(model), stream, rules)
