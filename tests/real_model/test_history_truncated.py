"""The embedded model (Qwen2.5-Coder-0.5B, Q4_K_M) behind reflexguard: a conversation whose
history carries a call cut off mid-arguments (as at max_tokens) gets an answer, and the
repair is counted (issue 22). No model-quality threshold: the answer must be a well-formed
completion or message, text or a call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient, TestServer

from reflexguard.embedded.child import ModelServer
from reflexguard.http.app import build_app
from reflexguard.ops.config import Settings

pytestmark = pytest.mark.real_model

CANCEL = {"type": "object", "required": ["order_id", "reason"], "properties": {
    "order_id": {"type": "string"},
    "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}}}
ASK = "Cancel order #W2378156, I ordered it by mistake."
TRUNCATED = '{"order_id": "#W2378156", "reason": "ordered by'


def chat_conversation() -> dict[str, Any]:
    return {"model": "embedded", "temperature": 0, "max_tokens": 48, "messages": [
        {"role": "user", "content": ASK},
        # "" rather than null: llama-cpp-python's server refuses a null content.
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "cancel_pending_order", "arguments": TRUNCATED}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "Error: the arguments were cut off"},
        {"role": "user", "content": "Please try again."}],
        "tools": [{"type": "function", "function": {"name": "cancel_pending_order",
                                                    "parameters": CANCEL}}]}


def messages_conversation() -> dict[str, Any]:
    return {"model": "embedded", "max_tokens": 48, "temperature": 0, "messages": [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "cancel_pending_order",
                                           "input": TRUNCATED}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": "the arguments were cut off"},
            {"type": "text", "text": "Please try again."}]}],
        "tools": [{"name": "cancel_pending_order", "input_schema": CANCEL}]}


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", chat_conversation()),
    ("/v1/messages", messages_conversation()),
])
async def test_a_history_with_a_truncated_call_gets_an_answer(
        q4_server: ModelServer, tmp_path: Path, path: str, body: dict[str, Any]) -> None:
    settings = Settings(upstream=q4_server.base_url, upstream_dialects=["chat"],
                        tool_call_format="content", max_repairs=0,
                        events=tmp_path / "events.jsonl")
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    try:
        # The CPU is shared: a first prompt here can take minutes, and it is not the point.
        response = await client.post(path, json=body, timeout=ClientTimeout(total=900))
        answer = await response.json()
        assert response.status == 200, answer
        if path == "/v1/messages":
            assert answer["type"] == "message" and answer["content"]
        else:
            message = answer["choices"][0]["message"]
            assert message.get("content") or message.get("tool_calls")
        metrics = await (await client.get("/metrics")).text()
        dialect = "messages" if path == "/v1/messages" else "chat"
        assert any(line.startswith("reflexguard_history_repaired_total{")
                   and 'kind="broken_json_repaired"' in line and f'dialect="{dialect}"' in line
                   and line.endswith(" 1.0") for line in metrics.splitlines())
    finally:
        await client.close()
