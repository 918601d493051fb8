"""A chat completion cut into the chunks an OpenAI server would stream. Pure.

Shared by the soak's fake upstream and the tests' fake upstream, so both stream alike.
"""

from __future__ import annotations

from typing import Any

Completion = dict[str, Any]


def stream_chunks(completion: Completion, include_usage: bool) -> list[dict[str, Any]]:
    """The completion cut into the chunks an OpenAI server would stream."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    for start in range(0, len(content), 8):
        chunks.append(chunk({"content": content[start:start + 8]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        chunks.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": function["name"],
                                                          "arguments": ""}}]}))
        args = function["arguments"]
        for start in range(0, len(args), 10):
            chunks.append(chunk({"tool_calls": [{"index": index, "function": {
                "arguments": args[start:start + 10]}}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": completion.get("usage")})
    return chunks
