"""`python -m bench.translate_cost`: translating a Claude-Code-sized Messages request to
Chat Completions, LiteLLM's adapter against reflexguard's (the issue-10 decision).

Needs the bench extra (litellm). Prints microseconds per translation and LiteLLM's
import time; figures only, never asserted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from reflexguard.dialects.messages import to_chat

SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
          "properties": {"command": {"type": "string", "description": "x" * 300},
                         "timeout": {"type": "number"}}, "required": ["command"]}
BODY: dict[str, Any] = {
    "model": "m", "max_tokens": 32000,
    "system": [{"type": "text", "text": "s" * 4000, "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hello " * 200}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "toolu_1", "name": "Tool1", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a\nb"}]}],
    "tools": [{"name": f"Tool{i}", "description": "d" * 800, "input_schema": SCHEMA}
              for i in range(12)],
    "tool_choice": {"type": "auto"}, "metadata": {"user_id": "u"},
}


def per_call_us(translate: Callable[[dict[str, Any]], object], rounds: int = 500) -> float:
    for _ in range(20):
        translate(dict(BODY))
    began = time.perf_counter()
    for _ in range(rounds):
        translate(dict(BODY))
    return (time.perf_counter() - began) / rounds * 1e6


def main() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    print(f"request: {len(orjson.dumps(BODY))} bytes, {len(BODY['tools'])} tools")
    print(f"reflexguard dialects.messages.to_chat: {per_call_us(to_chat):.1f} us")
    began = time.perf_counter()
    from litellm.llms.anthropic.messages.adapters.transformation import AnthropicAdapter
    imported = time.perf_counter() - began
    adapter = AnthropicAdapter()
    print(f"litellm AnthropicAdapter.translate_completion_input_params: "
          f"{per_call_us(adapter.translate_completion_input_params):.1f} us "
          f"(import {imported:.1f} s)")


if __name__ == "__main__":
    main()
