"""An exhausted ladder over HTTP: the least-bad attempt goes back (`best`, the default),
named by x-reflexguard-chosen-attempt and the outcome record, in every dialect; the
re-asks carry a length bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reflexguard.ops.events import read_event
from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.native_replies import anthropic_call, function_call, openai_response
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

# A schema_violation (detail missing), then worse: arguments that are not JSON, then a
# tool that does not exist.
FIRST_ARGS = {"order_id": "#W1234567"}
CHAT = [tool_call_completion("get_order_details", FIRST_ARGS),
        tool_call_completion("get_order_details", '{"order_id": '),
        tool_call_completion("get_order", GOOD)]
MESSAGES = [anthropic_call("get_order_details", FIRST_ARGS),
            anthropic_call("get_order_details", "not an object"),
            anthropic_call("get_order", GOOD)]
RESPONSES = [openai_response(function_call("get_order_details", FIRST_ARGS)),
             openai_response(function_call("get_order_details", '{"order_id": ')),
             openai_response(function_call("get_order", GOOD))]
ROUTES = {"chat": ("/v1/chat/completions", CHAT, chat_body),
          "messages": ("/v1/messages", MESSAGES, messages_body),
          "responses": ("/v1/responses", RESPONSES, responses_body)}


def outcome_records(path: Path) -> list[dict[str, Any]]:
    events = [read_event(line) for line in path.read_bytes().splitlines()]
    return [dict(e) for e in events if e["event"] == "outcome"]


def called(answer: dict[str, Any], dialect: str) -> tuple[str, Any]:
    if dialect == "chat":
        call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
        return call["name"], json.loads(call["arguments"])
    if dialect == "messages":
        block = answer["content"][-1]
        return block["name"], block["input"]
    item = answer["output"][-1]
    return item["name"], json.loads(item["arguments"])


@pytest.mark.parametrize("dialect", sorted(ROUTES))
async def test_the_first_answer_goes_back_when_every_re_ask_is_worse(fake, proxy, tmp_path,
                                                                   dialect):
    upstream, _ = fake
    path, replies, body = ROUTES[dialect]
    upstream.script = [Scripted(r) for r in replies]
    client = await proxy()
    response = await client.post(path, json=body())
    assert response.status == 200, await response.text()
    assert upstream.calls == 3
    answer = await response.json()
    assert called(answer, dialect) == ("get_order_details", FIRST_ARGS)
    assert answer == replies[0]  # byte for byte what the model first said
    assert response.headers["x-reflexguard-attempts"] == "3"
    assert response.headers["x-reflexguard-chosen-attempt"] == "1"
    [record] = outcome_records(tmp_path / "events.jsonl")
    assert record["outcome"] == "exhausted" and record["chosen_attempt"] == "1"
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_fallbacks_total{kind="least_bad_attempt_returned"} 1.0' in metrics
    # Both re-asks were bounded: room for the first answer's 10 tokens and the floor,
    # or the client's own smaller limit (the Messages body asks for 256).
    for sent in upstream.requests[1:]:
        limit = sent.get("max_output_tokens") if dialect == "responses" else \
            sent.get("max_tokens")
        assert limit == (256 if dialect == "messages" else 10 + 256), sent


@pytest.mark.parametrize("dialect", sorted(ROUTES))
async def test_passthrough_still_gives_the_last_attempt(fake, proxy, tmp_path, dialect):
    upstream, _ = fake
    path, replies, body = ROUTES[dialect]
    upstream.script = [Scripted(r) for r in replies]
    client = await proxy(on_exhausted="passthrough")
    response = await client.post(path, json=body())
    assert response.status == 200
    assert response.headers["x-reflexguard-chosen-attempt"] == "3"
    assert called(await response.json(), dialect)[0] == "get_order"
    assert outcome_records(tmp_path / "events.jsonl")[0]["chosen_attempt"] == "3"


async def test_a_later_strictly_better_attempt_is_returned(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(CHAT[2]), Scripted(CHAT[1]), Scripted(CHAT[0])]
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.headers["x-reflexguard-chosen-attempt"] == "3"
    assert called(await response.json(), "chat") == ("get_order_details", FIRST_ARGS)


async def test_the_clients_smaller_max_tokens_bounds_the_re_asks(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(r) for r in CHAT]
    client = await proxy()
    await client.post("/v1/chat/completions", json=chat_body(max_tokens=40))
    assert [r["max_tokens"] for r in upstream.requests] == [40, 40, 40]


async def test_a_clean_answer_names_the_first_attempt(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(tool_call_completion("get_order_details", GOOD))]
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.headers["x-reflexguard-chosen-attempt"] == "1"


async def test_the_live_simple_184_null_is_fixed_without_a_re_ask(fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.script = [Scripted(tool_call_completion(
        "cancel_order", {"order_id": "#W1234567", "reason": None}))]
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert upstream.calls == 1
    assert response.headers["x-reflexguard-chosen-attempt"] == "1+fix"
    assert called(await response.json(), "chat") == ("cancel_order", {"order_id": "#W1234567"})
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_fixes_total{kind="optional_null_dropped"} 1.0' in metrics
    attempts = [e for e in map(read_event, (tmp_path / "events.jsonl").read_bytes()
                               .splitlines()) if e["event"] == "attempt"]
    assert attempts[-1]["fixes"] == ["optional_null_dropped"]  # type: ignore[typeddict-item]


async def test_a_stream_gets_the_least_bad_attempt_too(fake, proxy, tmp_path):
    from tests.http.test_streaming import client_for, collect

    upstream, _ = fake
    upstream.script = [Scripted(r) for r in CHAT]
    client = await proxy()
    body = chat_body()
    stream = await client_for(client).chat.completions.create(
        model="m", messages=body["messages"], tools=body["tools"], stream=True)
    _, calls, _ = await collect(stream)
    assert upstream.calls == 3
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == \
        [("get_order_details", FIRST_ARGS)]
    assert outcome_records(tmp_path / "events.jsonl")[0]["chosen_attempt"] == "1"


async def test_the_settings_reach_the_ladder(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(r) for r in CHAT]
    client = await proxy(reask_max_tokens=64)
    await client.post("/v1/chat/completions", json=chat_body())
    assert [r.get("max_tokens") for r in upstream.requests] == [None, 64, 64]
    # safe_fixes off: the optional null is re-asked about, as before.
    upstream.requests.clear()
    upstream.script = [Scripted(tool_call_completion(
        "cancel_order", {"order_id": "#W1234567", "reason": None})),
        Scripted(tool_call_completion("cancel_order", {"order_id": "#W1234567"}))]
    client = await proxy(safe_fixes=False)
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert len(upstream.requests) == 2
    assert response.headers["x-reflexguard-chosen-attempt"] == "2"


@pytest.mark.parametrize("dialect", sorted(ROUTES))
async def test_re_asks_without_a_client_limit_are_bounded(fake, proxy, dialect):
    upstream, _ = fake
    path, replies, body = ROUTES[dialect]
    upstream.script = [Scripted(r) for r in replies]
    client = await proxy()
    sent = body()
    sent.pop("max_tokens", None)  # Messages requires one; the upstream here does not care
    await client.post(path, json=sent)
    field = "max_output_tokens" if dialect == "responses" else "max_tokens"
    # The first answer's 10 tokens and the floor (docs/repair.md's promise, issue 30).
    assert [r.get(field) for r in upstream.requests] == [None, 266, 266]


async def test_the_exhausted_error_names_no_attempt(fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.script = [Scripted(r) for r in CHAT]
    client = await proxy(on_exhausted="error")
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status == 502
    assert response.headers["x-reflexguard-chosen-attempt"] == "none"
    assert outcome_records(tmp_path / "events.jsonl")[0]["chosen_attempt"] == "none"
