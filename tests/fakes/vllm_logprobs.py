"""Chat completions with logprobs in vLLM's shape, for native `tool_calls` (hand-built).

HAND-BUILT, NOT RECORDED: the logprob values are invented; the shape follows vLLM's
`OpenAIServingChat` (vllm/entrypoints/openai/serving_chat.py, read at commit 003fe593):
- the full (non-stream) generator computes `_create_chat_logprobs` over *all* output
  token ids before the tool parser runs, so `logprobs.content` covers the raw call text
  (`<tool_call>\\n{"name": ...}\\n</tool_call>` for the Hermes/Qwen parser) while the
  message carries the parsed `tool_calls` and `content: null`;
- logprobs are returned only when `logprobs` is true AND `top_logprobs` is set;
- each entry's `bytes` is `list(token.encode("utf-8", errors="replace"))` of the decoded
  token, so a token that splits a multi-byte character arrives as "\\ufffd" with bytes
  [239, 191, 189]; logprobs are floored at -9999.0;
- `top_logprobs` lists the step's dict in order (the sampled token first, then the ranks).
"""

from __future__ import annotations

import copy
import json
from typing import Any

Step = tuple[str, float, list[tuple[str, float]]]


def entry(token: str, logprob: float, alternatives: list[tuple[str, float]]) -> dict[str, Any]:
    def shaped(text: str, value: float) -> dict[str, Any]:
        return {"token": text, "logprob": max(value, -9999.0),
                "bytes": list(text.encode("utf-8", errors="replace"))}
    return {**shaped(token, logprob),
            "top_logprobs": [shaped(token, logprob)] + [shaped(t, v) for t, v in alternatives]}


def confident(token: str) -> dict[str, Any]:
    return entry(token, -0.01, [("x", -6.0), ("y", -7.5), ("z", -8.0), ("w", -9.0)])


GET_ORDER_NAME_MARGIN = -0.4 - -1.3   # `_order` beat `_user` by 0.9 nats
CANCEL_NAME_MARGIN = -0.05 - -4.05   # `cancel` beat `get` by 4 nats
CALL_MARGIN = -0.2 - -1.9            # `<tool_call>` beat "I" (text) by 1.7 nats


def _steps_two_calls() -> list[dict[str, Any]]:
    return [
        entry("<tool_call>", -0.2, [("I", -1.9), ("Sure", -3.0), ("To", -4.0), ("```", -5.0)]),
        confident("\n"), confident('{"'), confident("name"), confident('":'),
        confident(' "'),
        entry("get", -0.1, [("cancel", -2.5), ("find", -4.0), ("list", -5.0), ("lookup", -6.0)]),
        entry("_order", -0.4, [("_user", -1.3), ("_orders", -2.0), ("_item", -5.0),
                               ("_product", -7.0)]),
        confident("_details"), confident('",'), confident(' "'), confident("arguments"),
        confident('":'), confident(' {"'), confident("order"), confident("_id"),
        confident('":'), confident(' "#'), confident("W"), confident("1"), confident("2"),
        confident("3"), confident('",'), confident(' "'), confident("note"), confident('":'),
        confident(' "'), confident("caf"), confident("é"), confident(" "),
        # 東 split by byte-level BPE into two tokens; vLLM decodes each piece as U+FFFD.
        entry("\ufffd", -0.3, [("\ufffd", -1.0), ("x", -6.0)]),
        entry("\ufffd", -0.2, [("京", -2.0), ("x", -6.0)]),
        confident("京"), confident('"}}\n'), confident("</tool_call>"), confident("\n"),
        entry("<tool_call>", -0.3, [("<|im_end|>", -1.6), ("\n", -4.0)]),
        confident("\n"), confident('{"'), confident("name"), confident('":'), confident(' "'),
        entry("cancel", -0.05, [("get", -4.05), ("return", -6.0), ("modify", -7.0),
                                ("exchange", -8.0)]),
        confident("_pending"), confident("_order"), confident('",'), confident(' "'),
        confident("arguments"), confident('":'), confident(' {"'), confident("order"),
        confident("_id"), confident('":'), confident(' "#'), confident("W"), confident("1"),
        confident("2"), confident("3"), confident('",'), confident(' "'), confident("reason"),
        confident('":'), confident(' "'), confident("ordered"), confident(" by"),
        confident(" mistake"), confident('"}}\n'), confident("</tool_call>"),
    ]


def native_two_calls() -> dict[str, Any]:
    """Two parsed native calls, logprobs over the raw Hermes text (see the module)."""
    calls = [
        ("chatcmpl-tool-1", "get_order_details", {"order_id": "#W123", "note": "café 東京"}),
        ("chatcmpl-tool-2", "cancel_pending_order",
         {"order_id": "#W123", "reason": "ordered by mistake"}),
    ]
    return copy.deepcopy({
        "id": "chatcmpl-vllm-shaped", "object": "chat.completion", "created": 1700000000,
        "model": "Qwen/Qwen2.5-7B-Instruct", "system_fingerprint": "hand-built",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": None, "reasoning_content": None,
                        "tool_calls": [
                            {"id": cid, "type": "function",
                             "function": {"name": name, "arguments": json.dumps(args)}}
                            for cid, name, args in calls]},
            "logprobs": {"content": _steps_two_calls()},
            "finish_reason": "tool_calls", "stop_reason": None,
        }],
        "usage": {"prompt_tokens": 300, "completion_tokens": 66, "total_tokens": 366},
    })


def raw_bytes_split() -> dict[str, Any]:
    """OpenAI's own convention for a split character: `bytes:\\x..` tokens with raw bytes."""
    steps = [
        entry('{"', -0.1, [("I", -2.1)]), confident("name"), confident('":'), confident(' "'),
        entry("greet", -0.5, [("hello", -0.9)]), confident('",'), confident(' "'),
        confident("arguments"), confident('":'), confident(' {"'), confident("who"),
        confident('":'), confident(' "'),
        {"token": "bytes:\\xe6\\x9d", "logprob": -0.1, "bytes": [0xE6, 0x9D],
         "top_logprobs": [{"token": "bytes:\\xe6\\x9d", "logprob": -0.1, "bytes": [0xE6, 0x9D]},
                          {"token": "x", "logprob": -3.0, "bytes": [120]}]},
        {"token": "bytes:\\xb1", "logprob": -0.2, "bytes": [0xB1],
         "top_logprobs": [{"token": "bytes:\\xb1", "logprob": -0.2, "bytes": [0xB1]}]},
        confident('"}}'),
    ]
    return {
        "id": "chatcmpl-bytes", "object": "chat.completion", "model": "hand-built",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant",
                                 "content": '{"name": "greet", "arguments": {"who": "東"}}'},
                     "logprobs": {"content": steps}}],
    }
