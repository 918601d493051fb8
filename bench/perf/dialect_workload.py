"""The overhead workload in each dialect: the same agent turn and valid call, as Chat
Completions, Anthropic Messages and OpenAI Responses (bench.overhead --dialect)."""

from __future__ import annotations

from typing import Any

import orjson

from bench.perf.workload import ANSWER, ANSWER_BYTES, REQUEST, REQUEST_BYTES, TOOLS

_CALL = ANSWER["choices"][0]["message"]["tool_calls"][0]  # type: ignore[index]
_SYSTEM, _USER = (m["content"] for m in REQUEST["messages"])  # type: ignore[attr-defined]
_FUNCTIONS: list[dict[str, Any]] = [t["function"] for t in TOOLS]

MESSAGES_REQUEST = {
    "model": "bench-model", "max_tokens": 1024, "system": _SYSTEM,
    "messages": [{"role": "user", "content": _USER}], "temperature": 0,
    "tools": [{"name": f["name"], "description": f["description"],
               "input_schema": f["parameters"]} for f in _FUNCTIONS],
}
MESSAGES_ANSWER = {
    "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench-model",
    "content": [{"type": "tool_use", "id": "toolu_bench", "name": _CALL["function"]["name"],
                 "input": orjson.loads(_CALL["function"]["arguments"])}],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 900, "output_tokens": 30},
}
RESPONSES_REQUEST = {
    "model": "bench-model", "instructions": _SYSTEM, "input": _USER, "temperature": 0,
    "tools": [{"type": "function", "name": f["name"], "description": f["description"],
               "parameters": f["parameters"], "strict": False} for f in _FUNCTIONS],
}
RESPONSES_ANSWER = {
    "id": "resp_bench", "object": "response", "created_at": 1700000000,
    "model": "bench-model", "status": "completed", "error": None, "incomplete_details": None,
    "output": [{"type": "function_call", "id": "fc_bench", "call_id": "call_bench",
                "name": _CALL["function"]["name"], "arguments": _CALL["function"]["arguments"],
                "status": "completed"}],
    "usage": {"input_tokens": 900, "output_tokens": 30, "total_tokens": 930},
}

# dialect -> (route under /v1, request bytes, the fast upstream's answer bytes)
WORKLOADS: dict[str, tuple[str, bytes, bytes]] = {
    "chat": ("chat/completions", REQUEST_BYTES, ANSWER_BYTES),
    "messages": ("messages", orjson.dumps(MESSAGES_REQUEST), orjson.dumps(MESSAGES_ANSWER)),
    "responses": ("responses", orjson.dumps(RESPONSES_REQUEST), orjson.dumps(RESPONSES_ANSWER)),
}
