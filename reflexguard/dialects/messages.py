"""The Anthropic Messages API (POST /v1/messages) mapped into the core and back.

Nothing here does I/O. A tool is {name, description, input_schema}; a call is a
`tool_use` content block {id, name, input}; a tool result is a `tool_result` block in a
user message. Unknown fields (cache_control, thinking, metadata, ...) are never touched in
the native body: only the chat view, which the core reads, leaves them out.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from reflexguard.core.errors import BadRequest
from reflexguard.core.fit import no_tool_fits
from reflexguard.core.ladder import RequestBuilders
from reflexguard.core.model import JsonObject, Reply, Verdict, as_object
from reflexguard.core.repair import (
    STREAM_ONLY_FIELDS,
    ConstrainedMode,
    call_feedback,
    intended_tools,
    reply_feedback,
    shown_reply,
)
from reflexguard.core.tool_records import ToolSet
from reflexguard.dialects.native import (
    NATIVE_KEY,
    Dialect,
    dumps,
    loads_object,
    text_of,
    tool_index,
)

STOP_TO_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length",
                  "stop_sequence": "stop", "pause_turn": "stop", "refusal": "content_filter"}
FINISH_TO_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens",
                  "content_filter": "refusal"}
# Request fields a Chat Completions upstream has no equivalent for: dropped in translation.
CARRIED = {"model", "messages", "system", "tools", "tool_choice", "max_tokens", "temperature",
           "top_p", "top_k", "stop_sequences", "stream", "metadata"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 529: "overloaded_error"}


def error_body(status: int, message: str, param: str | None = None,
               code: str | None = None) -> bytes:
    """Anthropic's error shape; `param` and `code` have no place in it and go in the text."""
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    text = f"{param}: {message}" if param and param not in message else message
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": text}})


def check(body: JsonObject) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: field required and must be a non-empty array",
                         param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"messages.{index}: must be an object with a string 'role'",
                             param=f"messages.{index}")
        if not isinstance(message.get("content"), str | list):
            raise BadRequest(f"messages.{index}.content: must be a string or a list of blocks",
                             param=f"messages.{index}.content")
    if "system" in body and not isinstance(body["system"], str | list):
        raise BadRequest("system: must be a string or a list of text blocks", param="system")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest("tools: must be an array", param="tools")
    for index, tool in enumerate(tools or []):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise BadRequest(f"tools.{index}: must be an object with a string 'name'",
                             param=f"tools.{index}")
        if _is_custom(tool) and not isinstance(tool.get("input_schema"), dict):
            raise BadRequest(f"tool {tool['name']!r}: input_schema must be a JSON object",
                             param=f"tools.{index}.input_schema", code="invalid_tool_schema")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("stream: must be a boolean", param="stream")


def schema_param(body: JsonObject, name: str) -> str:
    return f"tools.{tool_index(body.get('tools'), name)}.input_schema"


def _is_custom(tool: JsonObject) -> bool:
    """A client tool with a schema; server tools (web_search_20250305, bash_...) are not ours
    to validate and pass through untouched."""
    return tool.get("type") in (None, "custom") or "input_schema" in tool


# -- the request as the core sees it ------------------------------------------------------


def chat_tools(tools: object) -> list[JsonObject]:
    if not isinstance(tools, list):
        return []
    return [{"type": "function", "function": {
        "name": tool["name"], "description": tool.get("description", ""),
        "parameters": tool.get("input_schema")}}
        for tool in tools if isinstance(tool, dict) and _is_custom(tool)]


def chat_tool_choice(choice: object) -> tuple[object, bool | None]:
    """(chat tool_choice, parallel_tool_calls) for an Anthropic tool_choice."""
    choice = as_object(choice)
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    kind = choice.get("type")
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    return ("auto" if choice else None), parallel


def _image_part(block: JsonObject) -> JsonObject | None:
    source = as_object(block.get("source"))
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _user_messages(content: list[Any]) -> list[JsonObject]:
    """Tool results become tool messages (first, as chat templates expect them right after
    the calls); text and images stay one user message."""
    tools: list[JsonObject] = []
    parts: list[JsonObject] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            text = text_of(block.get("content"))
            if block.get("is_error") is True:
                text = f"Error: {text}"
            tools.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")),
                          "content": text})
        elif kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            image = _image_part(block)
            if image is not None:
                parts.append(image)
    messages = list(tools)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        content_out: object = "\n".join(p["text"] for p in parts) if only_text else parts
        messages.append({"role": "user", "content": content_out})
    return messages


def _assistant_message(content: list[Any]) -> JsonObject:
    texts: list[str] = []
    calls: list[JsonObject] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": {
                "name": str(block.get("name", "")), "arguments": dumps(block.get("input", {}))}})
    message: JsonObject = {"role": "assistant", "content": "\n".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(body: JsonObject) -> list[JsonObject]:
    messages: list[JsonObject] = []
    system = text_of(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in body.get("messages") or []:
        role, content = message.get("role"), message.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
        elif role == "assistant":
            messages.append(_assistant_message(content))
        elif role == "user":
            messages.extend(_user_messages(content))
        else:  # Claude Code puts a `system` message inside `messages`
            messages.append({"role": role, "content": text_of(content)})
    return messages


def to_chat(body: JsonObject) -> tuple[JsonObject, tuple[str, ...]]:
    """The Chat Completions request for this Messages request, and what it drops."""
    chat: JsonObject = {"model": body.get("model", ""), "messages": chat_messages(body)}
    tools = chat_tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    choice, parallel = chat_tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat["tool_choice"] = choice
    if parallel is not None:
        chat["parallel_tool_calls"] = parallel
    for key in ("max_tokens", "temperature", "top_p", "top_k"):
        if key in body:
            chat[key] = body[key]
    if isinstance(body.get("stop_sequences"), list):
        chat["stop"] = body["stop_sequences"]
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    user = as_object(body.get("metadata")).get("user_id")
    if isinstance(user, str):
        chat["user"] = user
    skipped = [t.get("name", "?") for t in body.get("tools") or []
               if isinstance(t, dict) and not _is_custom(t)]
    dropped = sorted(k for k in body if k not in CARRIED) + [f"tool:{n}" for n in skipped]
    return chat, tuple(dropped)


# -- replies ------------------------------------------------------------------------------


def completion_of(message: JsonObject) -> JsonObject:
    """The chat completion the core reads for a Messages reply; the reply rides along."""
    texts: list[str] = []
    calls: list[JsonObject] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append({"id": str(block.get("id") or ""), "type": "function", "function": {
                "name": block.get("name") if isinstance(block.get("name"), str) else "",
                "arguments": dumps(block.get("input"))}})
    chat_message: JsonObject = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        chat_message["tool_calls"] = calls
    stop = message.get("stop_reason")
    usage = as_object(message.get("usage"))
    completion: JsonObject = {
        "id": message.get("id"), "object": "chat.completion", "model": message.get("model"),
        "choices": [{"index": 0, "message": chat_message,
                     "finish_reason": STOP_TO_FINISH.get(stop, stop) if isinstance(stop, str)
                     else None}],
        NATIVE_KEY: message,
    }
    if usage:
        prompt, output = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
        if isinstance(prompt, int) and isinstance(output, int):
            completion["usage"] = {"prompt_tokens": prompt, "completion_tokens": output,
                                   "total_tokens": prompt + output}
    return completion


def native_of(completion: JsonObject, request: JsonObject,
              template: JsonObject | None) -> JsonObject:
    """The Messages reply for a chat completion: the upstream's own reply's fields kept
    where there is one (`template`), its text and calls replaced by the completion's. Its
    thinking blocks are kept, unmodified, ahead of them: they belong to that reply's calls."""
    choice = as_object((completion.get("choices") or [{}])[0])
    message = as_object(choice.get("message"))
    originals = {str(b.get("id")): b.get("input") for b in (template or {}).get("content") or []
                 if isinstance(b, dict) and b.get("type") == "tool_use"}
    content: list[JsonObject] = []
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = as_object(call.get("function"))
        arguments = function.get("arguments", "")
        parsed = loads_object(arguments) if isinstance(arguments, str) else arguments
        if parsed is None:  # an exhausted reply passed on: what the upstream sent, or {}
            parsed = originals.get(str(call.get("id")), {})
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                        "name": function.get("name", ""), "input": parsed})
    finish = choice.get("finish_reason")
    stop = FINISH_TO_STOP.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"
    if content and content[-1]["type"] == "tool_use":
        stop = "tool_use" if finish in (None, "stop", "tool_calls") else stop
    content = [*reasoning_of(template or {}), *content]
    usage = as_object(completion.get("usage"))
    base = dict(template) if template else {
        "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
        "model": request.get("model", completion.get("model", "")), "stop_sequence": None}
    native_usage = dict(as_object(base.get("usage")))
    native_usage["input_tokens"] = usage.get("prompt_tokens", native_usage.get("input_tokens", 0))
    native_usage["output_tokens"] = usage.get("completion_tokens",
                                              native_usage.get("output_tokens", 0))
    return {**base, "content": content, "stop_reason": stop, "usage": native_usage}


# -- re-asks ------------------------------------------------------------------------------


THINKING = ("thinking", "redacted_thinking")


def reasoning_of(message: JsonObject) -> list[JsonObject]:
    """A reply's thinking and redacted_thinking blocks, signatures included, as they are."""
    return [block for block in message.get("content") or []
            if isinstance(block, dict) and block.get("type") in THINKING]


def echo_reasoning(body: JsonObject, reask_body: JsonObject,
                   blocks: list[JsonObject]) -> JsonObject:
    """A re-ask whose echoed assistant turn starts with the failed reply's thinking blocks:
    with thinking enabled, the API refuses a tool_use turn without them. `body` is the
    caller's; the turn the re-ask added follows its messages."""
    messages = list(reask_body["messages"])
    at = len(body["messages"])
    if not blocks or len(messages) <= at or messages[at].get("role") != "assistant":
        return reask_body
    echoed = messages[at]
    messages[at] = {**echoed, "content": [*blocks, *echoed["content"]]}
    return {**reask_body, "messages": messages}


def reask(body: JsonObject, reply: Reply, verdict: Verdict, toolset: ToolSet) -> JsonObject:
    """The caller's body plus the failed tool_use blocks and a user message of tool_result
    blocks with is_error: true (or, for a reply without calls, its text and an instruction)."""
    new_body = {k: v for k, v in body.items() if k not in STREAM_ONLY_FIELDS}
    shown = shown_reply(reply)
    blocks: list[JsonObject] = []
    if shown.content:
        blocks.append({"type": "text", "text": shown.content})
    if reply.tool_calls:
        for call in shown.tool_calls:
            blocks.append({"type": "tool_use", "id": call.id, "name": call.name,
                           "input": as_object(loads_object(call.arguments))})
        results = [{"type": "tool_result", "tool_use_id": call_id, "is_error": True,
                    "content": text} for call_id, text in call_feedback(reply, verdict, toolset)]
        turn: list[JsonObject] = [{"role": "assistant", "content": blocks},
                                  {"role": "user", "content": results}]
    else:
        # The Messages API refuses empty text blocks: an empty reply is said in words.
        said = blocks or [{"type": "text", "text": "(no answer)"}]
        turn = [{"role": "assistant", "content": said},
                {"role": "user", "content": reply_feedback(verdict, toolset)}]
    new_body["messages"] = [*body["messages"], *turn]
    return new_body


def constrain(body: JsonObject, mode: ConstrainedMode, reply: Reply, verdict: Verdict,
              toolset: ToolSet) -> JsonObject:
    """The constrained last attempt: a forced tool_choice, whatever JSON mode is set, since
    that is the form every Messages server takes; `none` (a text answer) when the reply
    reached for a tool that is not there and the client allows text (core/fit.py)."""
    if mode == "off" or not toolset.names:
        return body
    client_choice = as_object(body.get("tool_choice")).get("type", "auto")
    if client_choice == "auto" and no_tool_fits(reply, verdict, toolset):
        return {**body, "tool_choice": {"type": "none"}}
    names = intended_tools(reply, verdict, toolset) or toolset.names
    choice: JsonObject = ({"type": "tool", "name": names[0]} if len(names) == 1
                          else {"type": "any"})
    if as_object(body.get("tool_choice")).get("disable_parallel_tool_use") is True:
        choice["disable_parallel_tool_use"] = True
    return {**body, "tool_choice": choice}


MESSAGES = Dialect(
    name="messages", path="messages", check=check, to_chat=to_chat,
    completion_of=completion_of, native_of=native_of,
    builders=RequestBuilders(reask=reask, constrain=constrain, json_constraints=False),
    error_body=error_body, schema_param=schema_param,
    reasoning_of=reasoning_of, echo_reasoning=echo_reasoning,
)
