"""Reading an incoming chat-completion request. Nothing here does I/O.

Only the envelope is checked (a JSON object with a list of messages that have roles)
and the tools compiled; every other field is forwarded as the client sent it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import msgspec
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
from reflexguard.core.tool_records import InvalidTools, InvalidToolSchema, ToolSet, ToolsTooDeep
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules


@dataclass(frozen=True)
class GroundingPolicy:
    """When set, identifier-like arguments must be grounded in the conversation."""

    pattern: re.Pattern[str] | None = None  # None: the ungrounded_entity check is off
    include_system: bool = False
    failed_result: re.Pattern[str] | None = None  # tool results that ground nothing


@dataclass(frozen=True, init=False)
class ChatRequest:
    """A chat request read for guarding. `fields` is the body as sent, except that a tools
    list read from the client's bytes (`tools_raw`) is null there: the cached tool set
    stands for it, and the list itself is parsed only if `body` is asked for (a re-ask)."""

    fields: JsonObject
    model: str
    stream: bool
    rules: CallRules | None  # None when the request offers no tools: nothing to guard
    tools_raw: bytes | None = None
    # Where `tools_raw` lies in the client's bytes, when found as a known list
    # (dialects/known_tools.py): the span history.has_calls need not scan.
    tools_span: tuple[int, int] | None = None

    def __init__(self, fields: JsonObject, model: str, stream: bool, rules: CallRules | None,
                 tools_raw: bytes | None = None,
                 tools_span: tuple[int, int] | None = None) -> None:
        # One per request: a frozen dataclass's own __init__ sets each field through
        # object.__setattr__, three times what filling the instance's dict costs (issue 23).
        self.__dict__.update(fields=fields, model=model, stream=stream, rules=rules,
                             tools_raw=tools_raw, tools_span=tools_span)

    @property
    def guarded(self) -> bool:
        return self.rules is not None

    @cached_property
    def body(self) -> JsonObject:
        """The whole body as the client sent it (a new dict when the tools are added)."""
        if self.tools_raw is None:
            return self.fields
        body = dict(self.fields)
        body["tools"] = orjson.loads(self.tools_raw)  # in the place the client put it
        return body


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


def check_messages(body: JsonObject) -> None:
    """Chat's envelope: a non-empty list of messages that have roles (raises BadRequest)."""
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


class _ToolsOnly(msgspec.Struct):
    tools: msgspec.Raw = msgspec.Raw(b"")


_TOOLS_ONLY = msgspec.json.Decoder(_ToolsOnly)
SPLIT_PREFIX = 48  # bytes of the tools list that locate it in the body


def split_tools(raw: bytes) -> tuple[bytes, bytes] | None:
    """(the body with its tools list replaced by null, the tools list's bytes as sent), or
    None when there is no list to split off safely. An agent sends the same tools every
    turn and they are most of its request (8 tools: 2 of 3 KB; 15: 11 of 12 KB): building
    them as Python objects only to find their cached tool set was most of reading it."""
    try:
        tools = bytes(_TOOLS_ONLY.decode(raw).tools)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None  # the full read says what is wrong, in its words
    if not tools.startswith(b"["):
        return None
    # Found by a prefix: searching for 10 KB of needle costs more than decoding the body.
    # The list occurs once unless its prefix occurs again (another value repeating it; a
    # JSON string cannot, the prefix holding an unescaped quote): then no split.
    prefix = tools[:SPLIT_PREFIX]
    at = raw.find(prefix)
    if at < 0 or not raw.startswith(tools, at) or raw.find(prefix, at + 1) >= 0:
        return None
    return raw[:at] + b"null" + raw[at + len(tools):], tools


def with_tools_bytes(fields: JsonObject, tools_raw: bytes, cache: ToolSetCache,
                grounding: GroundingPolicy, max_depth: int, raw: bytes,
                span: tuple[int, int] | None = None) -> ChatRequest:
    """The request for a body read without its tools list (null in `fields`), by the
    list's bytes: the cache's key, parsed only on a miss."""
    try:
        toolset = cache.get_serialised(tools_raw, max_depth - 1)
    except orjson.JSONDecodeError:  # e.g. bad UTF-8 in a string the split did not read
        parse_body(raw, max_depth)  # raises, with positions in the body the client sent
        raise
    except ToolsTooDeep:
        raise _too_deep(max_depth) from None
    except InvalidToolSchema as exc:
        raise BadRequest(str(exc), param=exc.param, code="invalid_tool_schema") from None
    except InvalidTools as exc:
        raise BadRequest(str(exc), param=exc.param) from None
    if toolset is None:  # an empty list: nothing to guard
        fields["tools"] = []  # our own parse, in the place the client put the list
        return _chat_request(fields, None, grounding)
    return _chat_request(fields, toolset, grounding, tools_raw, span)


def request_of(body: JsonObject, cache: ToolSetCache, grounding: GroundingPolicy,
               max_depth: int | None = None) -> ChatRequest:
    """A parsed chat body whose envelope was checked (here, or by a dialect translating its
    own request into this view). `max_depth`: the body's limit, for the tools that
    `parse_body(..., tools_checked_later=True)` left unchecked."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return _chat_request(body, None, grounding)
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
    return _chat_request(body, toolset, grounding)


def regrounded(chat: ChatRequest, grounding: GroundingPolicy) -> ChatRequest:
    """The same guarded request under another grounding policy (a low error budget turns
    the ungrounded_entity check on); the tool set is the one already compiled."""
    assert chat.rules is not None
    return _chat_request(chat.fields, chat.rules.toolset, grounding, chat.tools_raw,
                         chat.tools_span)


RULES_PER_TOOLSET = 16  # CallRules kept per tool set (frozen, so shared by its requests)


def _chat_request(fields: JsonObject, toolset: ToolSet | None, grounding: GroundingPolicy,
                  tools_raw: bytes | None = None,
                  tools_span: tuple[int, int] | None = None) -> ChatRequest:
    stream_flag = fields.get("stream", False)
    if not isinstance(stream_flag, bool) and stream_flag is not None:
        raise BadRequest("'stream' must be a boolean", param="stream")
    # The model name reaches metric labels, logs and events: bounded there, not upstream.
    model = safe_label(fields["model"]) if isinstance(fields.get("model"), str) else ""
    stream = stream_flag is True
    if toolset is None:
        return ChatRequest(fields, str(model), stream, None)
    parallel = fields.get("parallel_tool_calls") is not False
    choice = ToolChoice.parse(fields.get("tool_choice"))
    key = (choice.mode, choice.name, parallel)
    rules = toolset.rules.get(key)
    if rules is None:
        rules = CallRules(toolset=toolset, tool_choice=choice, parallel_tool_calls=parallel)
        if len(toolset.rules) < RULES_PER_TOOLSET:  # a named choice's name is the client's
            toolset.rules[key] = rules
    if grounding.pattern is not None:
        rules = CallRules(
            toolset=toolset,
            tool_choice=rules.tool_choice,
            parallel_tool_calls=parallel,
            grounding=collect_sources(fields["messages"], grounding.include_system,
                                      grounding.failed_result),
            identifier_pattern=grounding.pattern,
        )
    return ChatRequest(fields, str(model), stream, rules, tools_raw, tools_span)


@dataclass(frozen=True)
class ChatForm:
    """Chat Completions as the one reader (dialects/reader.py) reads it: its own envelope,
    no translation (the body is the chat view), and the tools list read by its bytes, the
    ToolSetCache's key (`to_chat` None says both)."""

    name: str = "chat"
    check: Callable[[JsonObject], None] = check_messages
    to_chat: None = None
    schema_param: None = None


CHAT = ChatForm()
