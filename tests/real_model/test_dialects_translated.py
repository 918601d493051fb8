"""The official Anthropic and OpenAI SDKs against reflexguard in front of the embedded
model, in translated mode (its llama-cpp-python server speaks only Chat Completions).

No model-quality threshold: the answer must be well-formed for the SDK, and either a
valid call of the offered tool or plain text (a bound-exhausted ladder passes the last
answer on); what reflexguard counted must carry the dialect's label.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web

from reflexguard.embedded.child import ModelServer
from reflexguard.http.app import build_app
from reflexguard.http.connections import answer_bound
from reflexguard.ops.config import Settings
from reflexguard.ops.loopback import free_port

pytestmark = pytest.mark.real_model

CANCEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
    },
    "required": ["order_id", "reason"],
}
PROMPT = "Cancel order #W2378156, I ordered it by mistake."
SETTINGS: dict[str, Any] = {"upstream_dialects": ["chat"], "tool_call_format": "content",
                            "max_repairs": 2}
# The SDKs wait as long as reflexguard may take under these settings, never less (issue 18).
CLIENT_TIMEOUT = answer_bound(Settings(upstream="http://127.0.0.1:9/v1", **SETTINGS))


@pytest.fixture(scope="module")
def translated_proxy(q4_server: ModelServer, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[str]:
    """reflexguard on a real port, in a thread, translating to the embedded model."""
    port = free_port()
    settings = Settings(upstream=q4_server.base_url,
                        events=tmp_path_factory.mktemp("events") / "events.jsonl",
                        **SETTINGS)
    started = threading.Event()
    holder: dict[str, Any] = {}

    def serve() -> None:
        import asyncio

        async def main() -> None:
            runner = web.AppRunner(build_app(settings), handler_cancellation=True)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            holder["stop"] = asyncio.Event()
            holder["loop"] = asyncio.get_running_loop()
            started.set()
            await holder["stop"].wait()
            await runner.cleanup()

        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(30)
    yield f"http://127.0.0.1:{port}"
    holder["loop"].call_soon_threadsafe(holder["stop"].set)
    thread.join(30)


def metrics(base: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_anthropic_sdk_gets_a_well_formed_message(translated_proxy: str) -> None:
    client = anthropic.Anthropic(base_url=translated_proxy, api_key="unused",
                           timeout=CLIENT_TIMEOUT)
    message = client.messages.create(
        model="embedded", max_tokens=256,
        messages=[{"role": "user", "content": PROMPT}],
        tools=[{"name": "cancel_pending_order", "description": "Cancel a pending order.",
                "input_schema": CANCEL_SCHEMA}],
    )
    assert message.type == "message" and message.role == "assistant"
    calls = [block for block in message.content if block.type == "tool_use"]
    assert all(block.type in ("text", "tool_use") for block in message.content)
    for block in calls:
        assert block.name == "cancel_pending_order" and isinstance(block.input, dict)
    if calls:
        assert 'dialect="messages"' in metrics(translated_proxy)


def test_anthropic_sdk_stream_is_parsed(translated_proxy: str) -> None:
    client = anthropic.Anthropic(base_url=translated_proxy, api_key="unused",
                           timeout=CLIENT_TIMEOUT)
    with client.messages.stream(
        model="embedded", max_tokens=256,
        messages=[{"role": "user", "content": PROMPT}],
        tools=[{"name": "cancel_pending_order", "input_schema": CANCEL_SCHEMA}],
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("end_turn", "tool_use", "max_tokens")
    assert all(block.type in ("text", "tool_use") for block in final.content)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_responses_are_well_formed(translated_proxy: str, stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{translated_proxy}/v1", api_key="unused",
                           timeout=CLIENT_TIMEOUT)
    tools: Any = [{"type": "function", "name": "cancel_pending_order",
                   "parameters": CANCEL_SCHEMA, "strict": False}]
    if stream:
        with client.responses.stream(model="embedded", input=PROMPT, tools=tools,
                                     temperature=0, max_output_tokens=256) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="embedded", input=PROMPT, tools=tools,
                                           temperature=0, max_output_tokens=256)
    calls = [item for item in response.output if item.type == "function_call"]
    assert all(item.type in ("message", "function_call") for item in response.output)
    for item in calls:
        assert item.name == "cancel_pending_order"
        assert isinstance(json.loads(item.arguments), dict)
    if calls:
        assert 'dialect="responses"' in metrics(translated_proxy)

