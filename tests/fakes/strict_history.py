"""Simulated model servers that render the history they are sent, as real ones do.

vLLM before its PR #48922 parses every historical call's arguments while rendering the
chat template and answers 400 with the JSON error (vLLM #43995); llama-server answers 500
"Failed to parse tool call arguments as JSON" (llama.cpp #25510). These fakes refuse the
same histories in the same way, in every wire format a request may reach them in (chat,
native Messages, native Responses); otherwise they answer what `reply(body)` gives.
Simulated: the answers are the test's, not a model's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Literal

from tests.fakes.fake_upstream import Scripted

Server = Literal["vllm", "llama"]
Reply = Callable[[dict[str, Any]], Scripted]


def historical_arguments(body: dict[str, Any]) -> Iterator[object]:
    """Every historical call's arguments, in whichever format `body` is written: chat
    `tool_calls[].function.arguments`, Messages `tool_use.input`, Responses `function_call`
    items' `arguments`. A Messages input is yielded as the JSON text a template renders."""
    for message in body.get("messages") or []:
        for call in message.get("tool_calls") or []:
            yield (call.get("function") or {}).get("arguments")
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                value = block.get("input")
                yield json.dumps(value) if isinstance(value, dict) else value
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            yield item.get("arguments")


def first_fault(body: dict[str, Any]) -> str | None:
    """The error a template renderer raises on this history, or None."""
    for arguments in historical_arguments(body):
        if not isinstance(arguments, str):
            return "Input should be a valid string"  # pydantic, on an object
        try:
            value = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return str(exc)
        if not isinstance(value, dict):
            return "tool call arguments must be a JSON object"
    return None


def strict_server(server: Server, reply: Reply) -> Callable[[dict[str, Any]], Scripted]:
    """A FakeUpstream `default`: `server`'s refusal for a broken history, else `reply`."""

    def answer(body: dict[str, Any]) -> Scripted:
        fault = first_fault(body)
        if fault is None:
            return reply(body)
        if server == "vllm":
            error = {"object": "error", "message": fault, "type": "BadRequestError",
                     "param": None, "code": 400}
            return Scripted(status=400, body=json.dumps(error).encode())
        error = {"error": {"code": 500, "type": "server_error",
                           "message": f"Failed to parse tool call arguments as JSON: {fault}"}}
        return Scripted(status=500, body=json.dumps(error).encode())

    return answer
