"""The one reading of a request, for every dialect: the client's bytes into the core's view.
Nothing here does I/O.

A dialect parametrises it by its form (`RequestForm`): its name, its envelope check and
its translation to the chat view (`to_chat`; None for chat, whose body is that view and
whose tools list the ToolSetCache reads by its bytes). The road is the same for all:

1. the fast path: a tools list seen before (dialects/known_tools.py) found right after
   the body's first `"tools":`; only the rest is parsed, checked and translated;
2. a split of the body (chat_request.split_tools): the rest parsed, the list read by its
   bytes (chat) or, held, as it was read before (Messages, Responses);
3. the full reading, whose words every refusal is in; a native list it accepted is then
   learned (a chat list is learned by step 2).

Any doubt on the way (a `tools` key elsewhere first, a rest that does not parse, an error)
goes on to the next step, so a request reads as its full reading would, only cheaper.
Bodies up to MIN_SPLIT_BYTES take the full reading (native; chat's split always pays).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, overload

import orjson

from reflexguard.core.errors import BadRequest
from reflexguard.core.history import HistoryReport
from reflexguard.core.limits import DEFAULT_MAX_JSON_DEPTH
from reflexguard.core.model import JsonObject
from reflexguard.core.tool_records import InvalidTools, InvalidToolSchema
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects.chat_request import (
    ChatForm,
    ChatRequest,
    GroundingPolicy,
    parse_body,
    regrounded,
    request_of,
    split_tools,
    with_tools_bytes,
)
from reflexguard.dialects.history import has_calls, repaired
from reflexguard.dialects.known_tools import AS_BYTES, KNOWN_TOOLS, Known
from reflexguard.dialects.native import (
    CheckEnvelope,
    Dialect,
    DialectRequest,
    SchemaParam,
    ToChat,
)

MIN_SPLIT_BYTES = 512  # below this, reading a native body whole costs less than splitting it

# (the body as read, its chat view, the fields the translation lost)
Pieces = tuple[JsonObject, ChatRequest, tuple[str, ...]]


class RequestForm(Protocol):
    """What a dialect gives the reader: chat_request.CHAT, native.Dialect."""

    @property
    def name(self) -> str: ...
    @property
    def check(self) -> CheckEnvelope: ...
    @property
    def to_chat(self) -> ToChat | None: ...
    @property
    def schema_param(self) -> SchemaParam | None: ...


@overload
def read_request(raw: bytes, form: ChatForm, cache: ToolSetCache, grounding: GroundingPolicy,
                 max_depth: int = ...) -> ChatRequest: ...
@overload
def read_request(raw: bytes, form: Dialect, cache: ToolSetCache, grounding: GroundingPolicy,
                 max_depth: int = ...) -> DialectRequest: ...
def read_request(raw: bytes, form: RequestForm, cache: ToolSetCache,
                 grounding: GroundingPolicy, max_depth: int = DEFAULT_MAX_JSON_DEPTH,
                 ) -> ChatRequest | DialectRequest:
    """The request in `raw`, read in `form`'s dialect (raises BadRequest, CompileNeeded):
    chat's ChatRequest itself, a native dialect's DialectRequest around its chat view."""
    pieces: Pieces | None = None
    split = None
    own_view = form.to_chat is None
    if own_view or len(raw) > MIN_SPLIT_BYTES:
        found = KNOWN_TOOLS.find(raw, form.name, max_depth)
        if found is not None:
            fields, known, tools, at = found
            pieces = _from_known(fields, known, tools, (at, at + len(tools)), raw, form,
                                 cache, grounding, max_depth)
        if pieces is None:
            split = split_tools(raw)
            if split is not None:
                pieces = _from_split(split, raw, form, cache, grounding, max_depth)
    if pieces is None:
        body = parse_body(raw, max_depth, tools_checked_later=own_view)
        pieces = _parsed(body, form, cache, grounding, None if not own_view else max_depth)
        if split is not None:
            _learn(split[1], form, max_depth, pieces, cache)
    if own_view:
        return pieces[1]
    return DialectRequest(*pieces)


@overload
def cleaned(raw: bytes, form: ChatForm, request: ChatRequest,
            ) -> tuple[bytes, ChatRequest, HistoryReport | None]: ...
@overload
def cleaned(raw: bytes, form: Dialect, request: DialectRequest,
            ) -> tuple[bytes, DialectRequest, HistoryReport | None]: ...
def cleaned(raw: bytes, form: RequestForm, request: ChatRequest | DialectRequest,
            ) -> tuple[bytes, ChatRequest | DialectRequest, HistoryReport | None]:
    """The bytes to forward and the request read from them: the client's, unless a
    historical tool call would make the model server refuse the conversation
    (dialects/history.py); then a repaired copy, and what was repaired."""
    if isinstance(request, ChatRequest):
        if not has_calls(raw, "chat", request.tools_span):  # the fast path: a bytes scan
            return raw, request, None
        fixed = repaired(request.fields, "chat", request.tools_raw)
        if fixed is None:
            return raw, request, None
        forwarded, fields, report = fixed
        return forwarded, dataclasses.replace(request, fields=fields), report
    if form.to_chat is None or not has_calls(raw, form.name):
        return raw, request, None
    fixed = repaired(request.body, form.name)
    if fixed is None:
        return raw, request, None
    forwarded, body, report = fixed
    chat_view, _ = form.to_chat(body)  # the same tools: the same rules, as read
    return forwarded, DialectRequest(body, dataclasses.replace(request.chat, fields=chat_view),
                                     request.dropped), report


def dialect_request(body: JsonObject, dialect: Dialect, cache: ToolSetCache,
                    grounding: GroundingPolicy) -> DialectRequest:
    """A parsed native body checked and read into the core's view (raises BadRequest): the
    full reading, as the Python API reads a caller's request."""
    return DialectRequest(*_parsed(body, dialect, cache, grounding, None))


def _parsed(body: JsonObject, form: RequestForm, cache: ToolSetCache,
            grounding: GroundingPolicy, max_depth: int | None) -> Pieces:
    """The full reading of a parsed body. `max_depth`: chat's limit for the tools list
    that parse_body(..., tools_checked_later=True) left to the cache."""
    form.check(body)
    if form.to_chat is None:
        return body, request_of(body, cache, grounding, max_depth), ()
    chat_body, dropped = form.to_chat(body)
    tools = chat_body.get("tools")
    if isinstance(tools, list) and tools:
        try:
            cache.get(tools)  # compiled once here, so a bad schema is named in native terms
        except InvalidToolSchema as exc:
            field = form.schema_param(body, exc.tool_name) if form.schema_param \
                else exc.param
            raise BadRequest(f"tool {exc.tool_name!r} has an invalid {field.rsplit('.')[-1]}: "
                             f"{str(exc).split(': ', 1)[-1]}", param=field,
                             code="invalid_tool_schema") from None
        except InvalidTools as exc:
            raise BadRequest(str(exc), param="tools") from None
    return body, request_of(chat_body, cache, grounding), dropped


def _from_known(fields: JsonObject, known: Known, tools: bytes, span: tuple[int, int] | None,
                raw: bytes, form: RequestForm, cache: ToolSetCache,
                grounding: GroundingPolicy, max_depth: int) -> Pieces | None:
    """The request for a parsed body whose `tools` (null in `fields`) is `known`; None
    where the later steps must say what is wrong."""
    try:
        form.check(fields)  # the envelope; the list passed when it was learned
        if form.to_chat is None:  # the cache reads the list by its bytes
            return fields, with_tools_bytes(fields, tools, cache, grounding, max_depth, raw,
                                            span), ()
        chat, dropped = form.to_chat(fields)
    except BadRequest:
        return None
    fields["tools"] = known.tools  # in the place the client put it: `fields` is ours
    if known.chat_tools is not None:
        chat = _with_chat_tools(chat, known.chat_tools)
    if known.rules is not None and known.cache is cache:
        # request_of's reading with the set already compiled (its tool choice, stream
        # and model read from this request, under this request's grounding).
        view = regrounded(ChatRequest(chat, "", False, known.rules), grounding)
    else:  # another app's cache: its own limits, and the full reading's words if refused
        try:
            view = request_of(chat, cache, grounding)
        except BadRequest:
            return None
    return fields, view, (*dropped, *known.dropped)


def _from_split(split: tuple[bytes, bytes], raw: bytes, form: RequestForm,
                cache: ToolSetCache, grounding: GroundingPolicy,
                max_depth: int) -> Pieces | None:
    rest, tools = split
    if form.to_chat is None:  # chat: everything but the tools, depth-checked; then the list
        fields = parse_body(rest, max_depth)
        form.check(fields)
        chat = with_tools_bytes(fields, tools, cache, grounding, max_depth, raw)
        if chat.guarded:
            KNOWN_TOOLS.learn(form.name, max_depth, tools, AS_BYTES)
        return fields, chat, ()
    known = KNOWN_TOOLS.get(form.name, max_depth, tools)
    if known is None:
        return None
    try:
        # Its depth, the list's own being below max_depth (the full reading found it so
        # in the body that taught it), is the body's; `tools` stands there as null.
        fields = parse_body(rest, max_depth)
    except BadRequest:
        return None
    if "tools" not in fields or fields["tools"] is not None:
        return None  # a duplicate key: the split did not stand for the body's list
    return _from_known(fields, known, tools, None, raw, form, cache, grounding, max_depth)


def _learn(tools_raw: bytes, form: RequestForm, max_depth: int, pieces: Pieces,
           cache: ToolSetCache) -> None:
    """Hold a native list its full reading accepted (a chat list is learned by the split)."""
    body, chat, dropped = pieces
    if form.to_chat is None:
        return
    tools = body.get("tools")
    known = Known(tools if isinstance(tools, list) else None, None, (), None, None)
    if known.tools is None or not KNOWN_TOOLS.fits(tools_raw, known):
        return
    try:  # the body's list must be the one the split found (JSON allows a key twice)
        if orjson.loads(tools_raw) != tools:
            return
    except orjson.JSONDecodeError:
        return
    chat_tools = chat.fields.get("tools")
    KNOWN_TOOLS.learn(form.name, max_depth, tools_raw, Known(
        known.tools, chat_tools if isinstance(chat_tools, list) else None,
        tuple(d for d in dropped if d.startswith("tool:")), chat.rules, cache))


def _with_chat_tools(chat: JsonObject, tools: list[Any]) -> JsonObject:
    """The chat view with its tools where to_chat puts them: after the messages."""
    out: JsonObject = {}
    for key, value in chat.items():
        out[key] = value
        if key == "messages":
            out["tools"] = tools
    return out
