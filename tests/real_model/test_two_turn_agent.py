"""A chat agent's two turns against the embedded model, through `reflexguard serve`.

Turn 1 asks for a tool call; turn 2 sends what LangChain and the Agents SDK send next: the
assistant's tool-call turn with `content: null`, then the tool's result. llama-cpp-python's
server refuses `content: null` (500, "Input should be a valid string"), so before the
embedded path normalised requests every chat agent's second turn failed. Both the
non-streamed and the streamed second turn must now get an answer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import openai
import pytest

from reflexguard.ops.loopback import free_port
from tests.real_model.test_serve_embedded import CANCEL, wait_healthy

pytestmark = pytest.mark.real_model

ASK = "Cancel order #W123, I ordered it by mistake."


def second_turn(call: Any) -> list[Any]:
    return [
        {"role": "user", "content": ASK},
        # As LangChain's ChatOpenAI and the Agents SDK write an assistant tool-call turn.
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call.id, "type": "function",
            "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id,
         "content": '{"status": "cancelled", "order_id": "#W123"}'},
    ]


def test_a_two_turn_chat_agent_gets_its_second_answer() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("REFLEXGUARD_") or k.upper() == "REFLEXGUARD_HOME"}
    process = subprocess.Popen([sys.executable, "-m", "reflexguard", "serve", "--port",
                                str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_healthy(port, process)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                               max_retries=0)
        first = client.chat.completions.create(
            model="embedded", temperature=0, max_tokens=128,
            tools=[CANCEL],  # type: ignore[list-item]
            messages=[{"role": "user", "content": ASK}])
        calls = first.choices[0].message.tool_calls
        assert calls, first.choices[0].message
        call: Any = calls[0]
        assert call.function.name == "cancel_pending_order"

        answer = client.chat.completions.create(
            model="embedded", temperature=0, max_tokens=64, tools=[CANCEL],  # type: ignore[list-item]
            messages=second_turn(call))
        message = answer.choices[0].message
        assert message.content or message.tool_calls, message

        streamed = client.chat.completions.create(
            model="embedded", temperature=0, max_tokens=64, tools=[CANCEL],  # type: ignore[list-item]
            messages=second_turn(call), stream=True)
        chunks: list[Any] = list(streamed)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        called = any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        assert text or called, chunks
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
