"""What every non-chat dialect provides. Nothing here does I/O.

The core speaks Chat Completions. A dialect maps its wire format into that view (the
request's tools, tool choice and conversation; a reply's text and calls) and back, and
writes the ladder's re-asks in its own form. The core never learns which dialect it serves.
Its requests are read by the one reader every dialect shares (dialects/reader.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from reflexguard.core.attempts import Attempt, LadderResult
from reflexguard.core.choice import agent_completion
from reflexguard.core.ladder import RequestBuilders
from reflexguard.core.model import JsonObject, Reply, Verdict
from reflexguard.core.tool_records import ToolSet
from reflexguard.dialects.chat_request import (
    ChatRequest,
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
