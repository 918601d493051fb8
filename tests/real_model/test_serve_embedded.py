"""The README's main command: `reflexguard serve` with no upstream fronts the embedded model.

Run as a real process and called with the `openai` client as a chat agent calls it, then
stopped with SIGTERM: the managed llama.cpp child must be gone afterwards.

Turn 1 asks for a tool call; turn 2 sends what LangChain and the Agents SDK send next: the
assistant's tool-call turn with `content: null`, then the tool's result. llama-cpp-python's
server refuses `content: null` (500, "Input should be a valid string"), so before the
embedded path normalised requests every chat agent's second turn failed. Both the
non-streamed and the streamed second turn must now get an answer.

One process for all of it: each `reflexguard serve` loads the model again (issue 23).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import openai
import pytest

from reflexguard.ops.loopback import free_port
from tests.fakes.processes import is_running

pytestmark = pytest.mark.real_model

CANCEL = {"type": "function", "function": {
    "name": "cancel_pending_order", "description": "Cancel a pending order.",
    "parameters": {"type": "object", "required": ["order_id", "reason"], "properties": {
        "order_id": {"type": "string"},
        "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}}}}}
ASK = "Cancel order #W123, I ordered it by mistake."


def wait_healthy(port: int, process: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "reflexguard serve exited early"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("reflexguard serve never became healthy")


def children_of(pid: int) -> list[int]:
    result = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in result.stdout.split()]


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


def test_a_chat_agent_gets_both_turns_through_the_embedded_default() -> None:
    port = free_port()
    # No REFLEXGUARD_* setting from the caller's shell: the defaults are what is tested.
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("REFLEXGUARD_") or k.upper() == "REFLEXGUARD_HOME"}
    process = subprocess.Popen([sys.executable, "-m", "reflexguard", "serve", "--port",
                                str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=env)
    try:
        wait_healthy(port, process)
        child = children_of(process.pid)
        assert child, "no managed model server"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                               max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="embedded", temperature=0, tools=[CANCEL],  # type: ignore[list-item]
            messages=[{"role": "user", "content": ASK}])
        reply = raw.parse().choices[0]
        assert int(raw.headers["x-reflexguard-attempts"]) >= 1
        assert reply.message.tool_calls, reply.message
        call: Any = reply.message.tool_calls[0]
        assert call.function.name == "cancel_pending_order"
        assert reply.finish_reason == "tool_calls"

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
    assert process.returncode == 0
    for pid in child:
        assert not is_running(pid), "the model server outlived reflexguard"
