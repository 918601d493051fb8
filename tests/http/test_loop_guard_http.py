"""The loop guard through the proxy (issue 32), every dialect, streamed and not, native and
translated, in front of the scripted fake upstream on loopback: a conversation that already
made one call twice with one result, and a model that proposes it a third time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.native_replies import anthropic_call, function_call, openai_response
from tests.http.dialect_fixtures import ASK, GOOD, messages_body, responses_body

RESULT = "Order #W1234567: pending, 2 items."
REPEATED = ("get_order_details", GOOD)
OTHER = ("cancel_order", {"order_id": "#W1234567"})
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
         "responses": "/v1/responses"}
CASES = [(dialect, stream, native)
         for dialect in ("chat", "messages", "responses")
         for stream in (False, True)
         for native in ((True,) if dialect == "chat" else (True, False))]


def looping(dialect: str, times: int = 2, result: str = RESULT, **extra: Any) -> dict[str, Any]:
    """The user's request, then the call REPEATED `times` times, each answered `result`."""
    args = json.dumps(GOOD)
    if dialect == "chat":
        body = chat_body(**extra)
        for t in range(times):
            body["messages"] += [
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"h{t}", "type": "function",
                     "function": {"name": REPEATED[0], "arguments": args}}]},
                {"role": "tool", "tool_call_id": f"h{t}", "content": result}]
        return body
    if dialect == "messages":
        messages: list[dict[str, Any]] = [{"role": "user", "content": ASK}]
        for t in range(times):
            messages += [
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": f"toolu_h{t}", "name": REPEATED[0],
                     "input": GOOD}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_h{t}", "content": result}]}]
        return messages_body(messages=messages, **extra)
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": ASK}]
    for t in range(times):
        items += [{"type": "function_call", "call_id": f"h{t}", "name": REPEATED[0],
                   "arguments": args},
                  {"type": "function_call_output", "call_id": f"h{t}", "output": result}]
    return responses_body(input=items, **extra)


def answer(dialect: str, native: bool, call: tuple[str, dict[str, Any]]) -> Scripted:
    name, arguments = call
    if not native or dialect == "chat":
        return Scripted(tool_call_completion(name, arguments))
    if dialect == "messages":
        return Scripted(anthropic_call(name, arguments))
    return Scripted(openai_response(function_call(name, arguments)))


def called(text: str, dialect: str, stream: bool) -> list[str]:
    """The tool names the agent was answered with (not the tool list a reply echoes)."""
    if not stream:
        body = json.loads(text)
        if dialect == "chat":
            return [c["function"]["name"]
                    for c in body["choices"][0]["message"].get("tool_calls") or []]
        if dialect == "messages":
            return [b["name"] for b in body["content"] if b["type"] == "tool_use"]
        return [i["name"] for i in body["output"] if i["type"] == "function_call"]
    names: list[str] = []
    for line in text.splitlines():
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        data = json.loads(line[5:])
        if dialect == "chat":
            names += [d["function"]["name"] for c in data.get("choices", [])
                      for d in c.get("delta", {}).get("tool_calls") or []
                      if d.get("function", {}).get("name")]
        elif dialect == "messages" and data.get("type") == "content_block_start" \
                and data["content_block"]["type"] == "tool_use":
            names.append(data["content_block"]["name"])
        elif data.get("type") == "response.output_item.done" \
                and data["item"]["type"] == "function_call":
            names.append(data["item"]["name"])
    return names


def counted(metrics: str, action: str, dialect: str) -> float:
    for line in metrics.splitlines():
        if (line.startswith("reflexguard_repeated_calls_total{") and f'action="{action}"' in line
                and f'dialect="{dialect}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def events(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == kind]


async def post(client: Any, dialect: str, body: dict[str, Any], stream: bool) -> str:
    response = await client.post(PATHS[dialect], json={**body, "stream": stream})
    text = (await response.read()).decode()
    assert response.status == 200, text
    return text


def proxy_settings(native: bool, **extra: Any) -> dict[str, Any]:
    return {"upstream_dialects": ["chat", "messages", "responses"] if native else ["chat"],
            "loop_guard": "repair", **extra}


@pytest.mark.parametrize(("dialect", "stream", "native"), CASES)
async def test_a_repeated_call_is_re_asked_and_the_new_answer_reaches_the_agent(
        fake, proxy, tmp_path: Path, dialect: str, stream: bool, native: bool) -> None:
    upstream, _ = fake
    upstream.script = [answer(dialect, native, REPEATED), answer(dialect, native, OTHER)]
    client = await proxy(**proxy_settings(native))
    text = await post(client, dialect, looping(dialect), stream)
    assert called(text, dialect, stream) == ["cancel_order"]
    assert upstream.calls == 2
    reask = json.dumps(upstream.requests[1])
    assert "already called" in reask and "pending, 2 items" in reask
    metrics = await (await client.get("/metrics")).text()
    assert counted(metrics, "replaced", dialect) == 1.0
    (record,) = events(tmp_path, "repeated_call")
    assert (record["action"], record["dialect"], record["calls"]) == (
        "replaced", dialect, [{"name": REPEATED[0], "times": 2}])
    kinds = [r["kind"] for r in events(tmp_path, "attempt")]
    assert kinds == ["initial", "loop"]


@pytest.mark.parametrize(("dialect", "stream", "native"), CASES)
async def test_a_re_ask_that_repeats_again_gives_the_agent_the_original(
        fake, proxy, tmp_path: Path, dialect: str, stream: bool, native: bool) -> None:
    upstream, _ = fake
    upstream.script = [answer(dialect, native, REPEATED), answer(dialect, native, REPEATED)]
    client = await proxy(**proxy_settings(native))
    text = await post(client, dialect, looping(dialect), stream)
    assert called(text, dialect, stream) == [REPEATED[0]]
    metrics = await (await client.get("/metrics")).text()
    assert counted(metrics, "kept", dialect) == 1.0
    assert 'reflexguard_fallbacks_total{kind="repeated_call_kept"} 1.0' in metrics
    (record,) = events(tmp_path, "repeated_call")
    assert (record["action"], record["reason"]) == ("kept", "repeated_again")


@pytest.mark.parametrize("dialect", ["chat", "messages", "responses"])
async def test_observe_counts_the_repeat_and_forwards_the_answer(
        fake, proxy, tmp_path: Path, dialect: str) -> None:
    upstream, _ = fake
    upstream.script = [answer(dialect, True, REPEATED)]
    client = await proxy(loop_guard="observe")
    text = await post(client, dialect, looping(dialect), False)
    assert called(text, dialect, False) == [REPEATED[0]] and upstream.calls == 1
    metrics = await (await client.get("/metrics")).text()
    assert counted(metrics, "observed", dialect) == 1.0


@pytest.mark.parametrize("dialect", ["chat", "messages", "responses"])
async def test_off_leaves_a_repeat_alone_and_no_repeat_below_the_threshold(
        fake, proxy, dialect: str) -> None:
    upstream, _ = fake
    upstream.default = answer(dialect, True, REPEATED)
    client = await proxy(loop_guard="off")
    await post(client, dialect, looping(dialect), False)
    guarded = await proxy(loop_guard="repair", loop_repeats=3)
    await post(guarded, dialect, looping(dialect), False)
    assert upstream.calls == 2  # one request each, no re-ask
    for c in (client, guarded):
        assert "reflexguard_repeated_calls_total{" not in await (await c.get("/metrics")).text()


async def test_a_poller_whose_result_changed_is_never_re_asked(fake, proxy) -> None:
    upstream, _ = fake
    upstream.default = answer("chat", True, REPEATED)
    body = looping("chat", times=1, result="running")
    body["messages"] += looping("chat", times=1, result="done")["messages"][-2:]
    client = await proxy(loop_guard="repair")
    await post(client, "chat", body, False)
    assert upstream.calls == 1


async def test_a_repeat_never_spends_the_error_budget(fake, proxy) -> None:
    """With one unit left an invalid reply would be withheld; a repeated valid one is
    re-asked, and when the re-ask repeats again the valid call still goes out."""
    upstream, _ = fake
    upstream.script = [answer("chat", True, REPEATED), answer("chat", True, REPEATED)]
    client = await proxy(loop_guard="repair")
    response = await client.post(PATHS["chat"], json=looping("chat"),
                                 headers={"x-reflexguard-error-budget": "1"})
    body = await response.json()
    assert response.headers["x-reflexguard-budget-remaining"] == "1"
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == REPEATED[0]
    assert response.headers["x-reflexguard-chosen-attempt"] == "1"
    assert response.headers["x-reflexguard-attempts"] == "2"
    assert body["usage"]["prompt_tokens"] == 20  # the agent is billed the re-ask too


async def test_a_turn_longer_than_the_scan_bound_is_read_from_its_end_and_counted(
        fake, proxy) -> None:
    from reflexguard.dialects.trajectory import MAX_SCANNED_CALLS

    upstream, _ = fake
    upstream.script = [answer("chat", True, REPEATED), answer("chat", True, OTHER)]
    body = chat_body()
    for t in range(MAX_SCANNED_CALLS):  # distinct calls, then the loop at the end
        body["messages"] += [
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"d{t}", "type": "function",
                 "function": {"name": "cancel_order", "arguments": json.dumps({"n": t})}}]},
            {"role": "tool", "tool_call_id": f"d{t}", "content": "done"}]
    body["messages"] += looping("chat")["messages"][2:]
    client = await proxy(loop_guard="repair")
    text = await post(client, "chat", body, False)
    assert called(text, "chat", False) == ["cancel_order"]  # the loop at the end was seen
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_fallbacks_total{kind="loop_scan_bound"} 1.0' in metrics
