"""What every non-chat dialect provides, and reading its requests. Nothing here does I/O.

The core speaks Chat Completions. A dialect maps its wire format into that view (the
request's tools, tool choice and conversation; a reply's text and calls) and back, and
writes the ladder's re-asks in its own form. The core never learns which dialect it serves.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from reflexguard.core.attempts import Attempt, LadderResult
from reflexguard.core.choice import agent_completion
from reflexguard.core.errors import BadRequest
from reflexguard.core.ladder import RequestBuilders
from reflexguard.core.limits import DEFAULT_MAX_JSON_DEPTH
from reflexguard.core.model import JsonObject, Reply, Verdict
from reflexguard.core.tool_records import InvalidTools, InvalidToolSchema, ToolSet
from reflexguard.core.toolset import KEY_PREFIX, ToolSetCache
from reflexguard.core.validate import CallRules
from reflexguard.dialects.chat_request import (
    ChatRequest,
    GroundingPolicy,
    fields_around,
    parse_body,
    regrounded,
    request_of,
    split_tools,
    tools_value_at,
)

DialectName = Literal["chat", "messages", "responses"]
DIALECTS: tuple[DialectName, ...] = ("chat", "messages", "responses")

# (chat view of the request, names of the fields the view could not carry)
ToChat = Callable[[JsonObject], tuple[JsonObject, tuple[str, ...]]]
# a native reply -> the chat completion the core reads
CompletionOf = Callable[[JsonObject], JsonObject]
# (chat completion to send, the native request, the native reply it came from or None)
NativeOf = Callable[[JsonObject, JsonObject, JsonObject | None], JsonObject]
ErrorBody = Callable[[int, str, str | None, str | None], bytes]
# the native request checked for what the dialect requires: raises BadRequest
CheckEnvelope = Callable[[JsonObject], None]
# (chat tool index) -> (native param of its schema, native field name)
SchemaParam = Callable[[JsonObject, str], str]
# a native reply -> its thinking blocks / reasoning items, as they are
ReasoningOf = Callable[[JsonObject], list[JsonObject]]
# (the caller's body, a re-ask built on it, the failed reply's reasoning) -> the re-ask
# with that reasoning echoed ahead of the failed calls
EchoReasoning = Callable[[JsonObject, JsonObject, list[JsonObject]], JsonObject]

NATIVE_KEY = "reflexguard_native"  # the chat view of a native reply keeps the reply here


@dataclass(frozen=True)
class Dialect:
    name: DialectName
    path: str  # the upstream route, relative to /v1
    check: CheckEnvelope
    to_chat: ToChat
    completion_of: CompletionOf
    native_of: NativeOf
    builders: RequestBuilders
    error_body: ErrorBody
    schema_param: SchemaParam
    reasoning_of: ReasoningOf
    echo_reasoning: EchoReasoning


@dataclass(frozen=True, init=False)
class DialectRequest:
    body: JsonObject  # as the client sent it; never mutated
    chat: ChatRequest  # the Chat Completions view the core validates against
    dropped: tuple[str, ...]  # request fields a translation to chat would lose

    def __init__(self, body: JsonObject, chat: ChatRequest, dropped: tuple[str, ...]) -> None:
        # One per request: a frozen dataclass's own __init__ sets each field through
        # object.__setattr__, three times what filling the dict costs (as ChatRequest's).
        self.__dict__.update(body=body, chat=chat, dropped=dropped)

    @property
    def guarded(self) -> bool:
        return self.chat.guarded


def read_dialect_request(raw: bytes, dialect: Dialect, cache: ToolSetCache,
                         grounding: GroundingPolicy,
                         max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> DialectRequest:
    if len(raw) <= MIN_SPLIT_BYTES:
        return dialect_request(parse_body(raw, max_depth), dialect, cache, grounding)
    request = KNOWN_TOOLS.find(raw, dialect, cache, grounding, max_depth)
    if request is not None:
        return request
    split = split_tools(raw)
    if split is not None:
        request = KNOWN_TOOLS.read(split, dialect, cache, grounding, max_depth)
        if request is not None:
            return request
    request = dialect_request(parse_body(raw, max_depth), dialect, cache, grounding)
    if split is not None:
        KNOWN_TOOLS.learn(split[1], dialect, max_depth, request, cache)
    return request


# -- a tools list seen before ---------------------------------------------------------------

MIN_SPLIT_BYTES = 512  # below this, reading the whole body costs less than splitting it
KNOWN_TOOLS_ENTRIES = 16
KNOWN_TOOLS_MAX_BYTES = 128 * 1024  # a longer list is read in full each time: 2 MiB held
LISTS_PER_PREFIX = 8  # known lists sharing their first KEY_PREFIX bytes, by prefix


@dataclass(frozen=True)
class _Known:
    """What a native tools list reads as, kept from its first full reading. The lists are
    shared by every request that sends the same bytes, as the compiled ToolSet is: nothing
    in reflexguard writes into a request body or its chat view (docs/decisions.md)."""

    tools: list[Any]  # the native list, as parsed
    chat_tools: list[Any] | None  # the chat view's list (None: no client tool)
    dropped: tuple[str, ...]  # its `tool:<name>` entries of `dropped`
    # The rules the full reading made (their ToolSet compiled by `cache`): a later request
    # read with the same cache takes the set from them instead of serialising the chat
    # list again to look it up (another app's cache, whose limits may differ, looks it up).
    rules: CallRules | None
    cache: ToolSetCache


class KnownTools:
    """The native twin of chat_request.known_tools: an agent sends the same tools every
    turn and they are most of its request, so a list seen before is neither scanned for,
    parsed, checked, translated nor looked up in the ToolSetCache by its JSON again; only
    the rest of the body is (issue 23). `find` locates it after the body's first `"tools":`
    by its leading bytes; `read` takes the split of a body where that failed (a `"tools"`
    key earlier, in a message). A list is learned only from a request its full reading
    accepted, and any doubt on a later one (its rest not parsing, an error, a `tools` the
    split did not stand for) sends it back to the full reading, which then says what is
    wrong in its own words. Bounded: KNOWN_TOOLS_ENTRIES lists of at most
    KNOWN_TOOLS_MAX_BYTES each, least recently used dropped first."""

    def __init__(self) -> None:
        self._known: OrderedDict[tuple[str, int, bytes], _Known] = OrderedDict()
        # (dialect, the first KEY_PREFIX bytes) -> the lists held that begin so, latest first
        self._by_prefix: dict[tuple[str, bytes], list[bytes]] = {}

    def find(self, raw: bytes, dialect: Dialect, cache: ToolSetCache,
             grounding: GroundingPolicy, max_depth: int) -> DialectRequest | None:
        """The request, when the body's first `"tools":` is followed by a list held here;
        else None (nothing is refused here: the split or the full reading reads it)."""
        at = tools_value_at(raw)
        if at is None:
            return None
        for tools in self._by_prefix.get((dialect.name, raw[at:at + KEY_PREFIX]), ()):
            if raw.startswith(tools, at):
                break
        else:
            return None
        key = (dialect.name, max_depth, tools)
        known = self._known.get(key)
        if known is None:  # learned under another depth limit
            return None
        fields = fields_around(raw, at, tools, max_depth)
        if fields is None:
            return None
        self._known.move_to_end(key)
        return self._request(fields, known, dialect, cache, grounding)

    def read(self, split: tuple[bytes, bytes], dialect: Dialect, cache: ToolSetCache,
             grounding: GroundingPolicy, max_depth: int) -> DialectRequest | None:
        rest, tools_raw = split
        known = self._known.get((dialect.name, max_depth, tools_raw))
        if known is None:
            return None
        self._known.move_to_end((dialect.name, max_depth, tools_raw))
        try:
            # Its depth, the list's own being below max_depth (the full reading found it so
            # in the body that taught it), is the body's; `tools` stands there as null.
            fields = parse_body(rest, max_depth)
        except BadRequest:
            return None
        if "tools" not in fields or fields["tools"] is not None:
            return None  # a duplicate key: the split did not stand for the body's list
        return self._request(fields, known, dialect, cache, grounding)

    @staticmethod
    def _request(fields: JsonObject, known: _Known, dialect: Dialect, cache: ToolSetCache,
                 grounding: GroundingPolicy) -> DialectRequest | None:
        """The request for a parsed body whose `tools` (null in `fields`) is `known`."""
        try:
            dialect.check(fields)  # the envelope; the list passed when it was learned
            chat, dropped = dialect.to_chat(fields)
        except BadRequest:
            return None
        fields["tools"] = known.tools  # in the place the client put it: `fields` is ours
        if known.chat_tools is not None:
            chat = _with_tools(chat, known.chat_tools)
        if known.rules is not None and known.cache is cache:
            # request_of's reading with the set already compiled (its tool choice, stream
            # and model read from this request, under this request's grounding).
            view = regrounded(ChatRequest(chat, "", False, known.rules), grounding)
        else:  # another app's cache: its own limits, and the full reading's words if refused
            try:
                view = request_of(chat, cache, grounding)
            except BadRequest:
                return None
        return DialectRequest(fields, view, (*dropped, *known.dropped))

    def learn(self, tools_raw: bytes, dialect: Dialect, max_depth: int,
              request: DialectRequest, cache: ToolSetCache) -> None:
        if len(tools_raw) > KNOWN_TOOLS_MAX_BYTES:
            return
        tools = request.body.get("tools")
        try:  # the body's list must be the one the split found (JSON allows a key twice)
            if not isinstance(tools, list) or orjson.loads(tools_raw) != tools:
                return
        except orjson.JSONDecodeError:
            return
        chat_tools = request.chat.fields.get("tools")
        sharing = self._by_prefix.setdefault((dialect.name, tools_raw[:KEY_PREFIX]), [])
        if tools_raw not in sharing:
            sharing.insert(0, tools_raw)
            del sharing[LISTS_PER_PREFIX:]  # still held: found by the split
        self._known[(dialect.name, max_depth, tools_raw)] = _Known(
            tools, chat_tools if isinstance(chat_tools, list) else None,
            tuple(d for d in request.dropped if d.startswith("tool:")),
            request.chat.rules, cache)
        while len(self._known) > KNOWN_TOOLS_ENTRIES:
            (name, _, evicted), _ = self._known.popitem(last=False)
            if not any(n == name and t == evicted for n, _, t in self._known):  # other depths
                self._forget_prefix(name, evicted)

    def _forget_prefix(self, dialect: str, tools_raw: bytes) -> None:
        prefix = (dialect, tools_raw[:KEY_PREFIX])
        sharing = self._by_prefix.get(prefix, [])
        if tools_raw in sharing:
            sharing.remove(tools_raw)
        if not sharing:
            self._by_prefix.pop(prefix, None)


def _with_tools(chat: JsonObject, tools: list[Any]) -> JsonObject:
    """The chat view with its tools where to_chat puts them: after the messages."""
    out: JsonObject = {}
    for key, value in chat.items():
        out[key] = value
        if key == "messages":
            out["tools"] = tools
    return out


KNOWN_TOOLS = KnownTools()  # one per process, as the ToolSetCache is one per app


def dialect_request(body: JsonObject, dialect: Dialect, cache: ToolSetCache,
                    grounding: GroundingPolicy) -> DialectRequest:
    """A parsed native body checked and read into the core's view (raises BadRequest)."""
    dialect.check(body)
    chat_body, dropped = dialect.to_chat(body)
    tools = chat_body.get("tools")
    if isinstance(tools, list) and tools:
        try:
            cache.get(tools)  # compiled once here, so a bad schema is named in native terms
        except InvalidToolSchema as exc:
            field = dialect.schema_param(body, exc.tool_name)
            raise BadRequest(f"tool {exc.tool_name!r} has an invalid {field.rsplit('.')[-1]}: "
                             f"{str(exc).split(': ', 1)[-1]}", param=field,
                             code="invalid_tool_schema") from None
        except InvalidTools as exc:
            raise BadRequest(str(exc), param="tools") from None
    return DialectRequest(body, request_of(chat_body, cache, grounding), dropped)


def native_reply(dialect: Dialect, body: JsonObject, result: LadderResult,
                 returned: Attempt) -> JsonObject:
    """The native reply for the ladder's answer: the returned attempt's own upstream reply
    as the template, its text and calls replaced by the agent's completion."""
    template = returned.completion.get(NATIVE_KEY)
    return dialect.native_of(agent_completion(result, returned), body,
                             template if isinstance(template, dict) else None)


def echoing_builders(dialect: Dialect,
                     reasoning: Callable[[], list[JsonObject]]) -> RequestBuilders:
    """The dialect's builders, with each re-ask echoing the thinking blocks / reasoning
    items of the reply it answers; `reasoning()` gives those of the latest upstream reply."""
    native = dialect.builders

    def reask(body: JsonObject, reply: Reply, verdict: Verdict,
              toolset: ToolSet) -> JsonObject:
        request = native.reask(body, reply, verdict, toolset)
        blocks = reasoning()
        return dialect.echo_reasoning(body, request, blocks) if blocks else request

    return RequestBuilders(reask=reask, constrain=native.constrain,
                           json_constraints=native.json_constraints)


def tool_index(tools: object, name: str) -> int:
    """Where the tool called `name` sits in a native tool list (0 if it cannot be found)."""
    if isinstance(tools, list):
        for index, tool in enumerate(tools):
            if isinstance(tool, dict) and tool.get("name") == name:
                return index
    return 0


def dumps(value: object) -> str:
    """Arguments as the JSON string the core reads; never raises on model output."""
    # orjson first: the stdlib's encoder cost ~0.1 s of loop for a 1.5 MB answer (issue 18).
    # What orjson refuses (integers past 64 bits, nesting past 255) takes the stdlib's road.
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        pass
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def loads_object(arguments: str) -> Any:
    """Arguments as a JSON value for a dialect that carries them parsed; None if not JSON."""
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return None


def text_of(content: object) -> str:
    """The text of a string or of a list of text-bearing blocks or parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [block["text"] for block in content
             if isinstance(block, dict) and isinstance(block.get("text"), str)]
    return "\n".join(texts) if len(texts) > 1 else "".join(texts)
