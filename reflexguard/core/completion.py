"""Reading replies out of chat completions and writing them back in. Nothing here does I/O.

Completions stay plain dicts so that fields reflexguard does not know about (vLLM's
`prompt_logprobs`, `kv_transfer_params`, ...) survive untouched.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable

import orjson

from reflexguard.core.extract import extract_calls
from reflexguard.core.model import JsonObject, Reply, ToolCall, as_object


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _read_calls(raw_calls: object) -> tuple[ToolCall, ...]:
    if not isinstance(raw_calls, list):
        return ()
    calls: list[ToolCall] = []
    for raw in raw_calls:
        if not isinstance(raw, dict):
            continue
        function = as_object(raw.get("function"))
        arguments = function.get("arguments")
        if not isinstance(arguments, str):  # some servers send an object, not a string
            arguments = "" if arguments is None else _dump(arguments)
        calls.append(
            ToolCall(
                id=_str_or_none(raw.get("id")) or new_call_id(),
                name=_str_or_none(function.get("name")) or "",
                arguments=arguments,
            )
        )
    return tuple(calls)


def _dump(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def choices_of(completion: JsonObject) -> list[JsonObject]:
    choices = completion.get("choices")
    if not isinstance(choices, list):
        return []
    return [c for c in choices if isinstance(c, dict)]


def reply_of(choice: JsonObject) -> Reply:
    message = choice.get("message")
    if not isinstance(message, dict):
        message = {}
    return Reply(
        content=_str_or_none(message.get("content")),
        tool_calls=_read_calls(message.get("tool_calls")),
        finish_reason=_str_or_none(choice.get("finish_reason")),
    )


def lift_text_calls(reply: Reply) -> Reply:
    """Turn calls written in `content` into real tool calls, as vLLM's tool parser does.

    Used only for upstreams declared `tool_call_format: content`: for them, text calls
    are the server's output format, not the model's mistake.
    """
    if reply.tool_calls:
        return reply
    extraction = extract_calls(reply.content)
    if not extraction.calls:
        return reply
    calls = tuple(
        ToolCall(id=new_call_id(), name=c.name, arguments=c.arguments) for c in extraction.calls
    )
    finish = "tool_calls" if reply.finish_reason in (None, "stop") else reply.finish_reason
    return Reply(content=extraction.remainder or None, tool_calls=calls, finish_reason=finish)


def unwrap_abstention(reply: Reply, key: str) -> Reply:
    """A JSON-constrained reply that took the no-call shape (`{key: text}`) as the text
    answer it is; any other reply unchanged."""
    if reply.tool_calls or not reply.content:
        return reply
    try:
        value = orjson.loads(reply.content)
    except orjson.JSONDecodeError:
        return reply
    if not (isinstance(value, dict) and len(value) == 1 and isinstance(value.get(key), str)):
        return reply
    return Reply(content=value[key], tool_calls=(), finish_reason=reply.finish_reason or "stop")


def message_of(reply: Reply) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
    return message


def with_reply(completion: JsonObject, reply: Reply, choice_index: int = 0) -> JsonObject:
    """A copy of `completion` whose chosen message is `reply`; the input is untouched."""
    result = dict(completion)
    choices = [dict(c) for c in choices_of(completion)]
    if not choices:
        choices = [{"index": 0}]
    choice = choices[choice_index]
    old_message = as_object(choice.get("message"))
    message = {k: copy.deepcopy(v) for k, v in old_message.items()
               if k not in ("content", "tool_calls")}
    message.update(message_of(reply))
    choice["message"] = message
    if reply.finish_reason is not None:
        choice["finish_reason"] = reply.finish_reason
    choices[choice_index] = choice
    result["choices"] = choices
    return result


def sum_usage(usages: Iterable[object]) -> JsonObject | None:
    """Token usage over every attempt: the agent is billed for the repairs too."""
    total: dict[str, int] = {}
    seen = False
    for usage in usages:
        if not isinstance(usage, dict):
            continue
        seen = True
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return dict(total) if seen else None
