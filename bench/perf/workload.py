"""A realistic guarded request: a retail-style agent turn with eight tools, and its answer."""

from __future__ import annotations

from typing import Any

import orjson


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ').capitalize()}.",
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


STRING = {"type": "string"}
TOOLS = [
    _tool("find_user_id_by_email", {"email": STRING}, ["email"]),
    _tool("find_user_id_by_name_zip", {"first_name": STRING, "last_name": STRING,
                                       "zip": STRING}, ["first_name", "last_name", "zip"]),
    _tool("get_order_details", {"order_id": STRING}, ["order_id"]),
    _tool("get_product_details", {"product_id": STRING}, ["product_id"]),
    _tool("get_user_details", {"user_id": STRING}, ["user_id"]),
    _tool("cancel_pending_order", {"order_id": STRING, "reason": {
        "type": "string", "enum": ["no longer needed", "ordered by mistake"]}},
        ["order_id", "reason"]),
    _tool("return_delivered_order_items", {"order_id": STRING, "item_ids": {
        "type": "array", "items": STRING}, "payment_method_id": STRING},
        ["order_id", "item_ids", "payment_method_id"]),
    _tool("transfer_to_human_agents", {"summary": STRING}, ["summary"]),
]

REQUEST = {
    "model": "bench-model",
    "messages": [
        {"role": "system", "content": "You are a retail customer-service agent. " * 20},
        {"role": "user", "content": "Hi, I want to cancel order #W2378156, I ordered it by "
                                    "mistake. My email is yusuf.rossi@example.com."},
    ],
    "tools": TOOLS,
    "temperature": 0,
}

ANSWER = {
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
    "model": "bench-model", "system_fingerprint": "simulated",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_bench", "type": "function", "function": {
                "name": "cancel_pending_order",
                "arguments": '{"order_id": "#W2378156", "reason": "ordered by mistake"}'}}]}}],
    "usage": {"prompt_tokens": 900, "completion_tokens": 30, "total_tokens": 930},
}

REQUEST_BYTES = orjson.dumps(REQUEST)
ANSWER_BYTES = orjson.dumps(ANSWER)
