"""A corpus of hostile tool schemas (issue 18): fan-out, recursion, patterns, huge enums,
huge arrays and 2,000 tools, each with the answer a model would give to hurt most, as
requests for the chat, Messages and Responses routes with the fake's native replies.

Shared by tests/http/test_fuzz_schemas.py (no input may block the loop) and
bench/perf/hostile_schemas.py (the worst block, before and after, in one run). It lives
in bench because what ships never imports the tests (pyproject's import contracts);
tests/http/fuzz/hostile_schemas.py is its name on the fuzz suite's side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

JsonObject = dict[str, Any]
ROUTES = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
          "responses": "/v1/responses"}


@dataclass(frozen=True)
class Hostile:
    name: str
    tools: tuple[tuple[str, JsonObject], ...]  # (name, parameters)
    call: str  # the tool the model calls
    arguments: str  # what it answers, as JSON text
    refused: bool  # whether compiling must refuse it (a 400 naming `call`'s tool)
    blocked_by: str | None = None  # a known block outside the schema's cost, and where


def _chain(depth: int, combinator: str) -> JsonObject:
    defs: JsonObject = {
        f"d{i}": {combinator: [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(depth)}
    defs[f"d{depth}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def _string(pattern: str) -> JsonObject:
    return {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}


def _one(name: str, parameters: JsonObject, arguments: str, refused: bool,
         blocked_by: str | None = None) -> Hostile:
    return Hostile(name, (("t", parameters),), "t", arguments, refused, blocked_by)


def _fan_recursion() -> JsonObject:
    branch = {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}}
    return {"$defs": {"n": {"anyOf": [branch, branch]}}, "$ref": "#/$defs/n"}


def _deep(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def corpus() -> list[Hostile]:
    enum = [f"v{i}" for i in range(20_000)]
    many = tuple((f"tool_{i}", {"type": "object", "properties": {
        f"p{i}": {"type": "string"}, "n": {"type": "integer", "minimum": i}},
        "required": [f"p{i}"]}) for i in range(2_000))
    return [
        _one("anyOf-chain-40", _chain(40, "anyOf"), '{"x": 1}', True),
        _one("allOf-chain-40", _chain(40, "allOf"), '{"x": 1}', True),
        _one("oneOf-chain-18", _chain(18, "oneOf"), '{"x": 1}', True),
        _one("anyOf-chain-11-in-budget", _chain(11, "anyOf"), '{"x": 1}', False),
        _one("recursion-fanning", _fan_recursion(), _deep(40), True),
        _one("recursion-without-descent",
             {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
             '{"x": 1}', False),
        _one("lookbehind", _string("(?<=(a+)+)b"), orjson.dumps({"x": "a" * 30_000}).decode(),
             True),
        _one("negative-lookbehind", _string("(?<!(a+)+)b"),
             orjson.dumps({"x": "a" * 30_000}).decode(), True),
        _one("backreference-backtracking", _string(r"^(\w+\s?)*\1$"),
             orjson.dumps({"x": "a" * 30_000 + "!"}).decode(), False),
        _one("long-string-message", _string("^b"), orjson.dumps({"x": "a" * 30_000}).decode(),
             False),
        _one("enum-20000-over-2000-items",
             {"type": "object", "properties": {"a": {"type": "array", "items": {"enum": enum}}}},
             orjson.dumps({"a": ["zz"] * 2_000}).decode(), False),
        _one("array-500000-wrong-type",
             {"type": "object", "properties": {"a": {"type": "array",
                                                     "items": {"type": "string"}}}},
             orjson.dumps({"a": [1] * 500_000}).decode(), False),
        Hostile("2000-tools", many, "tool_7", '{"p7": "x", "n": 7}', False),
    ]


# -- requests and the fake's native replies --------------------------------------------------


def request_body(route: str, hostile: Hostile) -> bytes:
    if route == "chat":
        return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}],
                             "tools": [{"type": "function", "function": {
                                 "name": name, "parameters": schema}}
                                 for name, schema in hostile.tools]})
    if route == "messages":
        return orjson.dumps({"model": "m", "max_tokens": 256,
                             "messages": [{"role": "user", "content": "go"}],
                             "tools": [{"name": name, "input_schema": schema}
                                       for name, schema in hostile.tools]})
    return orjson.dumps({"model": "m", "input": "go",
                         "tools": [{"type": "function", "name": name, "parameters": schema}
                                   for name, schema in hostile.tools]})


def _chat_reply(hostile: Hostile) -> JsonObject:
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_1", "type": "function", "function": {
                        "name": hostile.call, "arguments": hostile.arguments}}]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def _messages_reply(hostile: Hostile) -> JsonObject:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": hostile.call,
                         "input": orjson.loads(hostile.arguments)}],
            "stop_reason": "tool_use", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}


def _responses_reply(hostile: Hostile) -> JsonObject:
    return {"id": "resp_1", "object": "response", "created_at": 0, "status": "completed",
            "model": "m", "output": [{"type": "function_call", "id": "fc_1",
                                      "call_id": "call_1", "name": hostile.call,
                                      "arguments": hostile.arguments, "status": "completed"}],
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}


REPLIES: dict[str, Callable[[Hostile], JsonObject]] = {
    "chat": _chat_reply, "messages": _messages_reply, "responses": _responses_reply}


def reply_body(route: str, hostile: Hostile) -> bytes:
    return orjson.dumps(REPLIES[route](hostile))
