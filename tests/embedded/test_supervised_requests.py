"""The embedded path accepts what agents send: a chat agent's second turn, through the proxy.

The child is tests/embedded/validating_child.py: it validates every chat request with
llama-cpp-python's own request model and answers 500 where the real server does. The
proxy, the supervisor and SupervisedUpstream are the real ones (cli/serve.supervised_app).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from reflexguard.cli.serve import supervised_app
from reflexguard.embedded import lifetime
from reflexguard.embedded.child import ModelServer
from reflexguard.embedded.supervisor import RestartPolicy, Supervisor
from reflexguard.http.upstream import Upstream, UpstreamHTTPError
from reflexguard.ops.config import Settings
from reflexguard.ops.loopback import free_port

pytest.importorskip("llama_cpp.server.types")  # the embedded extra; CI installs it

CHILD = Path(__file__).parent / "validating_child.py"
FAST = RestartPolicy(backoff=(0.1,), ready_timeout=30.0, poll_interval=0.05)
WEATHER: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL: dict[str, Any] = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
# A chat agent's second turn as LangChain and the Agents SDK send it.
SECOND_TURN: dict[str, Any] = {"model": "embedded", "tools": [WEATHER], "messages": [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 18 C"}]}

Client = TestClient[Any, Any]


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[tuple[Client, Path, Supervisor]]:
    record = tmp_path / "bodies.jsonl"

    def launch() -> ModelServer:
        port = free_port()
        log_path = tmp_path / f"child-{port}.log"
        with log_path.open("wb") as log:
            spawned = lifetime.spawn([sys.executable, str(CHILD), str(port), "--record",
                                      str(record)], log)
        return ModelServer(spawned.process, f"http://127.0.0.1:{port}/v1", log_path, "SIM",
                           spawned.follows_parent)

    supervisor = Supervisor(launch, FAST)
    settings = Settings(upstream=None, tool_call_format="content",
                        upstream_dialects=["chat"])
    client: Client = TestClient(TestServer(supervised_app(settings, supervisor)))
    await client.start_server()
    try:
        await wait_ready(client)
        yield client, record, supervisor
    finally:
        await client.close()


async def wait_ready(client: Client) -> None:
    import asyncio

    for _ in range(600):
        if (await client.get("/healthz")).status == 200:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the child never became ready")


def sent(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def fallbacks(text: str, kind: str) -> float:
    needle = f'reflexguard_fallbacks_total{{kind="{kind}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(needle))


async def test_a_chat_agents_second_turn_gets_an_answer(
        embedded: tuple[Client, Path, Supervisor]) -> None:
    client, record, _ = embedded
    response = await client.post("/v1/chat/completions", json=SECOND_TURN)
    assert response.status == 200, await response.text()
    assert (await response.json())["choices"][0]["message"]["content"] == \
        "It is sunny in Oslo."
    forwarded = sent(record)[-1]["messages"][1]
    assert forwarded == {"role": "assistant", "content": "", "tool_calls": [CALL]}
    metrics = await (await client.get("/metrics")).text()
    assert fallbacks(metrics, "llama_cpp_null_content") == 1


async def test_the_streamed_second_turn_is_normalised_too(
        embedded: tuple[Client, Path, Supervisor]) -> None:
    client, record, _ = embedded
    response = await client.post("/v1/chat/completions", json={**SECOND_TURN, "stream": True})
    text = await response.text()
    assert response.status == 200, text
    assert "It is sunny in Oslo." in text and "[DONE]" in text
    assert sent(record)[-1]["messages"][1]["content"] == ""


async def test_a_translated_responses_turn_with_include_drops_nothing(
        embedded: tuple[Client, Path, Supervisor]) -> None:
    """The Agents SDK's Responses turn, translated to chat for the child: `include: []`
    asks for nothing, so it is no dropped field (and `developer` arrives as system)."""
    client, record, _ = embedded
    response = await client.post("/v1/responses", json={
        "model": "embedded", "include": [], "tools": [{
            "type": "function", "name": "get_weather", "parameters": WEATHER["function"][
                "parameters"]}],
        "input": [{"role": "developer", "content": "Be brief."},
                  {"role": "user", "content": "Weather in Oslo?"}]})
    assert response.status == 200, await response.text()
    assert sent(record)[-1]["messages"][0]["role"] == "system"
    metrics = await (await client.get("/metrics")).text()
    assert fallbacks(metrics, "translation_dropped_fields") == 0


async def test_a_body_that_needs_nothing_reaches_the_child_as_it_was_sent(
        embedded: tuple[Client, Path, Supervisor]) -> None:
    client, record, _ = embedded
    clean = {**SECOND_TURN, "messages": [
        SECOND_TURN["messages"][0], {**SECOND_TURN["messages"][1], "content": ""},
        SECOND_TURN["messages"][2]], "parallel_tool_calls": False}
    response = await client.post("/v1/chat/completions", json=clean)
    assert response.status == 200
    assert sent(record)[-1] == clean
    metrics = await (await client.get("/metrics")).text()
    assert not [line for line in metrics.splitlines()
                if line.startswith('reflexguard_fallbacks_total{kind="llama_cpp_')]


async def test_other_upstreams_are_not_rewritten(
        embedded: tuple[Client, Path, Supervisor]) -> None:
    """Only the embedded upstream normalises: the same body sent by the plain client (what
    a vLLM or OpenAI upstream gets) reaches the server as it is, and this one refuses it."""
    _, _, supervisor = embedded
    child = supervisor.serving()
    assert child is not None
    plain = Upstream(child.base_url)
    await plain.start()
    try:
        with pytest.raises(UpstreamHTTPError) as refused:
            await plain.post_json("chat/completions", json.dumps(SECOND_TURN).encode(),
                                  plain.headers({}))
    finally:
        await plain.close()
    assert refused.value.status == 500
    assert b"Input should be a valid string" in refused.value.body

