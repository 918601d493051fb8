"""The README's main command: `reflexguard serve` with no upstream fronts the embedded model.

Run as a real process, called with the `openai` client, then stopped with SIGTERM: the
managed llama.cpp child must be gone afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from reflexguard.ops.loopback import free_port

pytestmark = pytest.mark.real_model

CANCEL = {"type": "function", "function": {
    "name": "cancel_pending_order", "description": "Cancel a pending order.",
    "parameters": {"type": "object", "required": ["order_id", "reason"], "properties": {
        "order_id": {"type": "string"},
        "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}}}}}


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


def test_openai_client_gets_a_real_tool_call_through_the_embedded_default() -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "reflexguard", "serve", "--port",
                                str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:
        wait_healthy(port, process)
        child = children_of(process.pid)
        assert child, "no managed model server"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        raw = client.chat.completions.with_raw_response.create(
            model="embedded", temperature=0, tools=[CANCEL],  # type: ignore[list-item]
            messages=[{"role": "user",
                       "content": "Cancel order #W123, I ordered it by mistake."}])
        reply = raw.parse().choices[0]
        assert int(raw.headers["x-reflexguard-attempts"]) >= 1
        assert reply.message.tool_calls, reply.message
        assert reply.message.tool_calls[0].function.name == "cancel_pending_order"
        assert reply.finish_reason == "tool_calls"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert process.returncode == 0
    for pid in child:
        assert not is_running(pid), "the model server outlived reflexguard"


def is_running(pid: int) -> bool:
    """Alive and not a zombie awaiting its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
