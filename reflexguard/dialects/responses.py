"""The OpenAI Responses API (POST /v1/responses) mapped into the core and back.

Nothing here does I/O. A tool is flat {type: "function", name, parameters, strict}; a
`namespace` tool holds nested function tools (Codex sends one); built-in tools
(web_search, file_search, ...) have no schema and are passed through, never validated.
A call is an output item {type: "function_call", call_id, name, arguments}; a result is an
input item {type: "function_call_output", call_id, output}. With previous_response_id the
earlier turns live upstream: only what is in this request is validated.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from reflexguard.core.errors import BadRequest, error_body
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
from reflexguard.dialects.native import NATIVE_KEY, Dialect, dumps, text_of, tool_index

CARRIED = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
           "max_output_tokens", "temperature", "top_p", "stream", "user"}


def check(body: JsonObject) -> None:
    if "input" in body and not isinstance(body["input"], str | list):
        raise BadRequest("'input' must be a string or an array of items", param="input")
    items = body.get("input")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            raise BadRequest(f"input[{index}] must be an object", param=f"input[{index}]")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest("'tools' must be an array", param="tools")
    for index, tool in enumerate(_function_tools(tools)[1]):
        if not isinstance(tool.get("name"), str):
            raise BadRequest(f"tools[{index}].name is missing", param=f"tools[{index}]")
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise BadRequest(f"tool {tool['name']!r}: parameters must be a JSON object",
                             param=f"tools[{index}].parameters", code="invalid_tool_schema")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream")


def schema_param(body: JsonObject, name: str) -> str:
    return f"tools[{tool_index(body.get('tools'), name)}].parameters"


def _function_tools(tools: object) -> tuple[list[str], list[JsonObject]]:
    """(names of built-in tools, the function tools, nested namespaces flattened)."""
    builtins: list[str] = []
    functions: list[JsonObject] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function":
            functions.append(tool)
        elif tool.get("type") == "namespace":
            nested = _function_tools(tool.get("tools"))
            builtins.extend(nested[0])
            functions.extend(nested[1])
        else:
            builtins.append(str(tool.get("type")))
    return builtins, functions


# -- the request as the core sees it ------------------------------------------------------


def chat_tools(tools: object) -> list[JsonObject]:
    return [{"type": "function", "function": {
        "name": tool.get("name"), "description": tool.get("description", ""),
        "parameters": tool.get("parameters")}} for tool in _function_tools(tools)[1]]


def chat_tool_choice(choice: object) -> object:
    if choice in ("auto", "none", "required"):
        return choice
    named = as_object(choice)
    if named.get("type") == "function" and isinstance(named.get("name"), str):
        return {"type": "function", "function": {"name": named["name"]}}
    return None  # built-in or allowed_tools choices: validated as auto


def _part_text(part: object) -> str:
    part = as_object(part)
    return part["text"] if isinstance(part.get("text"), str) else ""


def chat_messages(body: JsonObject) -> list[JsonObject]:
    messages: list[JsonObject] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role", "user")
            messages.append({"role": "system" if role == "developer" else role,
                             "content": text_of(item.get("content"))})
        elif kind == "function_call":
            call = {"id": str(item.get("call_id", "")), "type": "function", "function": {
                "name": str(item.get("name", "")), "arguments": str(item.get("arguments", ""))}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)  # a list this function created
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")),
                             "content": output if isinstance(output, str) else text_of(output)})
    return messages


def to_chat(body: JsonObject) -> tuple[JsonObject, tuple[str, ...]]:
    chat: JsonObject = {"model": body.get("model", ""), "messages": chat_messages(body)}
    builtins, _ = _function_tools(body.get("tools"))
    tools = chat_tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    choice = chat_tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat["tool_choice"] = choice
    for key in ("parallel_tool_calls", "temperature", "top_p", "user"):
        if key in body:
            chat[key] = body[key]
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    dropped = sorted(k for k in body if k not in CARRIED and not _asks_nothing(k, body[k])
                     ) + [f"tool:{b}" for b in builtins]
    return chat, tuple(dropped)


def _asks_nothing(key: str, value: object) -> bool:
    """`include: []` or `include: null` (the Agents SDK sends the former on every turn)
    asks for no extra output, so translating it away drops nothing."""
    return key == "include" and (value is None or value == [])


# -- replies ------------------------------------------------------------------------------


def completion_of(response: JsonObject) -> JsonObject:
    texts: list[str] = []
    calls: list[JsonObject] = []
    for item in response.get("output") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            texts.extend(_part_text(p) for p in item.get("content") or [])
        elif item.get("type") == "function_call":
            arguments = item.get("arguments")
            calls.append({"id": str(item.get("call_id") or item.get("id") or ""),
                          "type": "function", "function": {
                              "name": item.get("name") if isinstance(item.get("name"), str)
                              else "",
                              "arguments": arguments if isinstance(arguments, str)
                              else dumps(arguments)}})
    message: JsonObject = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    incomplete = as_object(response.get("incomplete_details")).get("reason")
    finish = ("length" if incomplete == "max_output_tokens" else
              "tool_calls" if calls else "stop")
    completion: JsonObject = {
        "id": response.get("id"), "object": "chat.completion", "model": response.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        NATIVE_KEY: response,
    }
    usage = as_object(response.get("usage"))
    prompt, output = usage.get("input_tokens"), usage.get("output_tokens")
    if isinstance(prompt, int) and isinstance(output, int):
        completion["usage"] = {"prompt_tokens": prompt, "completion_tokens": output,
                               "total_tokens": prompt + output}
    return completion


def output_items(message: JsonObject) -> list[JsonObject]:
    items: list[JsonObject] = []
    if isinstance(message.get("content"), str) and message["content"]:
        items.append({"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}",
                      "status": "completed", "role": "assistant", "content": [
                          {"type": "output_text", "text": message["content"],
                           "annotations": []}]})
    for call in message.get("tool_calls") or []:
        function = as_object(call.get("function"))
        items.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}",
                      "call_id": call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
                      "name": function.get("name", ""),
                      "arguments": str(function.get("arguments", "")), "status": "completed"})
    return items


def native_of(completion: JsonObject, request: JsonObject,
              template: JsonObject | None) -> JsonObject:
    choice = as_object((completion.get("choices") or [{}])[0])
    # The template's reasoning items come first: they belong to the calls it made.
    items = [*reasoning_of(template or {}), *output_items(as_object(choice.get("message")))]
    # The upstream's own item ids are kept for calls it made, so a later turn can cite them.
    own = {str(i.get("call_id")): i.get("id") for i in (template or {}).get("output") or []
           if isinstance(i, dict) and i.get("type") == "function_call"}
    for item in items:
        if item["type"] == "function_call" and own.get(item["call_id"]):
            item["id"] = own[item["call_id"]]
    usage = as_object(completion.get("usage"))
    length = choice.get("finish_reason") == "length"
    base = dict(template) if template else {
        "id": f"resp_{uuid.uuid4().hex[:24]}", "object": "response",
        "created_at": int(time.time()), "model": request.get("model", ""),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools", []),
        "error": None, "metadata": {}, "previous_response_id":
            request.get("previous_response_id")}
    native_usage: dict[str, Any] = dict(as_object(base.get("usage")))
    native_usage["input_tokens"] = usage.get("prompt_tokens", native_usage.get("input_tokens", 0))
    native_usage["output_tokens"] = usage.get("completion_tokens",
                                              native_usage.get("output_tokens", 0))
    native_usage["total_tokens"] = native_usage["input_tokens"] + native_usage["output_tokens"]
    return {**base, "status": "incomplete" if length else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if length else None,
            "output": items, "usage": native_usage}


# -- re-asks ------------------------------------------------------------------------------


def _input_items(body: JsonObject) -> list[Any]:
    items = body.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return list(items) if isinstance(items, list) else []


def reasoning_of(response: JsonObject) -> list[JsonObject]:
    """A reply's reasoning items, summary and encrypted content as received."""
    return [item for item in response.get("output") or []
            if isinstance(item, dict) and item.get("type") == "reasoning"]


def echo_reasoning(body: JsonObject, reask_body: JsonObject,
                   items: list[JsonObject]) -> JsonObject:
    """A re-ask whose input has the failed reply's reasoning items ahead of its echoed
    function_call items (after the caller's own input), as the API expects them."""
    if not items:
        return reask_body
    at = len(_input_items(body))
    turn = list(reask_body["input"])
    return {**reask_body, "input": [*turn[:at], *items, *turn[at:]]}


def reask(body: JsonObject, reply: Reply, verdict: Verdict, toolset: ToolSet) -> JsonObject:
    """The caller's input plus the failed function_call items and one function_call_output
    per call saying what is wrong (or, without calls, the reply's text and an instruction)."""
    new_body = {k: v for k, v in body.items() if k not in STREAM_ONLY_FIELDS}
    shown = shown_reply(reply)
    turn: list[JsonObject] = []
    if shown.content:
        turn.append({"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": shown.content}]})
    if reply.tool_calls:
        turn.extend({"type": "function_call", "call_id": call.id, "name": call.name,
                     "arguments": call.arguments} for call in shown.tool_calls)
        turn.extend({"type": "function_call_output", "call_id": call_id, "output": text}
                    for call_id, text in call_feedback(reply, verdict, toolset))
    else:
        turn.append({"type": "message", "role": "user",
                     "content": reply_feedback(verdict, toolset)})
    new_body["input"] = [*_input_items(body), *turn]
    return new_body


def constrain(body: JsonObject, mode: ConstrainedMode, reply: Reply, verdict: Verdict,
              toolset: ToolSet) -> JsonObject:
    """A forced tool_choice: the function the failed reply reached for, else "required";
    "none" (a text answer) when the reply reached for a tool that is not there and the
    client allows text (core/fit.py)."""
    if mode == "off" or not toolset.names:
        return body
    if body.get("tool_choice", "auto") == "auto" and no_tool_fits(reply, verdict, toolset):
        return {**body, "tool_choice": "none"}
    names = intended_tools(reply, verdict, toolset) or toolset.names
    choice: object = ({"type": "function", "name": names[0]} if len(names) == 1
                      else "required")
    return {**body, "tool_choice": choice}


RESPONSES = Dialect(
    name="responses", path="responses", check=check, to_chat=to_chat,
    completion_of=completion_of, native_of=native_of,
    builders=RequestBuilders(reask=reask, constrain=constrain, json_constraints=False),
    error_body=error_body, schema_param=schema_param,
    reasoning_of=reasoning_of, echo_reasoning=echo_reasoning,
)
