"""A replayed history with a broken tool call, through the proxy, in front of simulated model
servers that refuse it as vLLM before PR #48922 (400) and llama-server (500) do: sent
straight to the server the conversation fails; through reflexguard it gets its answer and
the counters say what was repaired. Every dialect, streamed and not, native and translated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from reflexguard.dialects.messages import MESSAGES
from reflexguard.dialects.native import Dialect
from reflexguard.dialects.responses import RESPONSES
from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, text_completion
from tests.fakes.native_replies import anthropic_message, message_item, openai_response, text_block
from tests.fakes.strict_history import Server, first_fault, strict_server
from tests.http.dialect_fixtures import ASK, messages_body, responses_body

TRUNCATED = '{"order_id": "#W1234567", "detail": "fu'  # a call cut at max_tokens
FAILED = "Error: the arguments were not valid JSON"
DIALECTS: dict[str, Dialect] = {"messages": MESSAGES, "responses": RESPONSES}
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
         "responses": "/v1/responses"}


def replayed(dialect: str, arguments: Any = TRUNCATED) -> dict[str, Any]:
    """A second turn whose history carries one call with `arguments`, and its result."""
    if dialect == "chat":
        body = chat_body()
        body["messages"] += [
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_order_details", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "c1", "content": FAILED},
            {"role": "user", "content": "Please try again."}]
        return body
    if dialect == "messages":
        return messages_body(messages=[
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_order_details",
                 "input": arguments}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": FAILED,
                 "is_error": True},
                {"type": "text", "text": "Please try again."}]}])
    return responses_body(input=[
        {"type": "message", "role": "user", "content": ASK},
        {"type": "function_call", "call_id": "call_1", "name": "get_order_details",
         "arguments": arguments},
        {"type": "function_call_output", "call_id": "call_1", "output": FAILED},
        {"type": "message", "role": "user", "content": "Please try again."}])


def answer(dialect: str, native: bool) -> Scripted:
    if not native or dialect == "chat":
        return Scripted(text_completion("Your order #W1234567 is on its way."))
    if dialect == "messages":
        return Scripted(anthropic_message(text_block("Your order #W1234567 is on its way.")))
    return Scripted(openai_response(message_item("Your order #W1234567 is on its way.")))


def repaired(metrics: str, kind: str, dialect: str) -> float:
    """reflexguard_history_repaired_total for (kind, dialect) in a /metrics page."""
    for line in metrics.splitlines():
        if (line.startswith("reflexguard_history_repaired_total{") and f'kind="{kind}"' in line
                and f'dialect="{dialect}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def read_all(response: Any) -> str:
    return (await response.read()).decode()


CASES = [(dialect, stream, server, native)
         for dialect in ("chat", "messages", "responses")
         for stream in (False, True)
         for server in ("vllm", "llama")
         for native in ((True,) if dialect == "chat" else (True, False))]


@pytest.mark.parametrize(("dialect", "stream", "server", "native"), CASES)
async def test_a_replayed_broken_call_fails_direct_and_succeeds_through_the_guard(
        fake, proxy, tmp_path: Path, dialect: str, stream: bool, server: Server,
        native: bool) -> None:
    upstream, upstream_server = fake
    upstream.default = strict_server(server, lambda _: answer(dialect, native))
    body = replayed(dialect)
    body["stream"] = stream
    path = PATHS[dialect]
    refused = 400 if server == "vllm" else 500

    # Without hygiene: the server refuses the conversation, turn after turn.
    upstream_path = path if native else "/v1/chat/completions"
    direct_body = body if native else DIALECTS[dialect].to_chat(body)[0]  # as translated
    async with ClientSession() as session, session.post(
            upstream_server.make_url(upstream_path), json=direct_body) as direct:
        assert direct.status == refused
    upstream.requests.clear()

    client = await proxy(upstream_dialects=["chat", "messages", "responses"] if native
                         else ["chat"])
    response = await client.post(path, json=body)
    text = await read_all(response)
    assert response.status == 200, text
    if stream:  # the words arrive split across events: the stream ended, with no error
        assert '"error":{' not in text and ("[DONE]" in text or "message_stop" in text
                                          or "response.completed" in text)
    else:
        assert "is on its way" in text
    forwarded = upstream.requests[-1]
    assert first_fault(forwarded) is None
    metrics = await (await client.get("/metrics")).text()
    assert repaired(metrics, "broken_json_repaired", dialect) == 1.0
    records = [json.loads(line) for line in
               (tmp_path / "events.jsonl").read_text().splitlines()]
    assert {"event": "history_repaired", "dialect": dialect,
            "kinds": {"broken_json_repaired": 1}}.items() <= next(
        r for r in records if r["event"] == "history_repaired").items()


@pytest.mark.parametrize("dialect", ["chat", "messages", "responses"])
async def test_the_repaired_call_keeps_its_failure_visible_in_its_result(
        fake, proxy, dialect: str) -> None:
    upstream, _ = fake
    upstream.default = strict_server("vllm", lambda _: answer(dialect, True))
    client = await proxy()
    response = await client.post(PATHS[dialect], json=replayed(dialect, "{not json at all"))
    assert response.status == 200, await response.text()
    forwarded = json.dumps(upstream.requests[-1])
    assert "[reflexguard] this call's arguments were not valid JSON" in forwarded
    assert "{not json at all" in forwarded  # quoted in the note, so the model sees it


@pytest.mark.parametrize("dialect", ["chat", "messages", "responses"])
async def test_a_valid_history_is_forwarded_as_the_clients_bytes(
        fake, proxy, dialect: str) -> None:
    upstream, _ = fake
    upstream.default = strict_server("vllm", lambda _: answer(dialect, True))
    client = await proxy()
    body = replayed(dialect, {"order_id": "#W1234567", "detail": "full"}
                    if dialect == "messages" else '{"order_id": "#W1234567", "detail": "full"}')
    response = await client.post(PATHS[dialect], json=body)
    assert response.status == 200
    assert upstream.requests[-1] == body
    metrics = await (await client.get("/metrics")).text()
    assert "reflexguard_history_repaired_total{" not in metrics


async def test_an_unguarded_chat_request_is_cleaned_too(fake, proxy) -> None:
    """No tools offered (nothing to guard in the answer), but the history still reaches a
    server that renders it."""
    upstream, _ = fake
    upstream.default = strict_server("llama", lambda _: answer("chat", True))
    body = replayed("chat")
    del body["tools"]
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status == 200, await response.text()
    assert first_fault(upstream.requests[-1]) is None
