"""The repair ladder end to end: fake upstream on loopback, real aiohttp client and server."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TOOLS, chat_body
from tests.fakes.fake_upstream import (
    Scripted,
    completion_with_message,
    text_completion,
    tool_call_completion,
)

GOOD = {"order_id": "#W1234567", "detail": "full"}


def valid() -> Scripted:
    return Scripted(tool_call_completion("get_order_details", GOOD))


def invalid() -> Scripted:
    return Scripted(tool_call_completion("get_order_detail", GOOD))


async def post(client: Any, body: dict[str, Any], **headers: str) -> tuple[int, Any, Any]:
    response = await client.post("/v1/chat/completions", json=body, headers=headers)
    return response.status, await response.json(), response.headers


async def test_valid_call_costs_no_extra_upstream_call_and_is_byte_identical(fake, proxy):
    upstream, _ = fake
    upstream.script = [valid()]
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert upstream.calls == 1
    assert response.headers["x-reflexguard-attempts"] == "1"
    assert response.headers["x-reflexguard-violations"] == "0"
    expected = tool_call_completion("get_order_details", GOOD)
    assert json.loads(await response.read()) == expected


async def test_unknown_fields_reach_the_upstream_untouched(fake, proxy):
    upstream, _ = fake
    upstream.script = [valid()]
    client = await proxy()
    extras = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20,
              "structured_outputs": None, "logprobs": True}
    await post(client, chat_body(**extras))
    assert all(upstream.requests[0][k] == v for k, v in extras.items())


async def test_request_without_tools_is_forwarded_as_is(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(text_completion('{"name": "x", "arguments": {}}'))]
    client = await proxy()
    body = chat_body()
    del body["tools"]
    status, answer, headers = await post(client, body)
    assert status == 200 and "x-reflexguard-attempts" not in headers
    assert answer == text_completion('{"name": "x", "arguments": {}}')
    assert upstream.requests == [body]


async def test_one_repair_is_exactly_two_upstream_calls(fake, proxy):
    upstream, _ = fake
    upstream.script = [invalid(), valid()]
    client = await proxy()
    body = chat_body()
    snapshot = copy.deepcopy(body)
    status, answer, headers = await post(client, body)
    assert status == 200 and upstream.calls == 2
    assert headers["x-reflexguard-attempts"] == "2"
    assert headers["x-reflexguard-violations"] == "1"
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == (
        "get_order_details"
    )
    assert answer["usage"]["total_tokens"] == 40  # both attempts
    reask = upstream.requests[1]["messages"]
    assert reask[:2] == snapshot["messages"]
    assert reask[-1]["role"] == "tool" and "get_order_detail" in reask[-1]["content"]
    assert body == snapshot


async def test_no_repair_text_reaches_the_agent(fake, proxy):
    upstream, _ = fake
    upstream.script = [
        invalid(),
        Scripted(tool_call_completion("get_order_details", GOOD,
                                      content="Sorry, I fix the error you reported.")),
    ]
    client = await proxy()
    _, answer, _ = await post(client, chat_body())
    text = json.dumps(answer)
    assert "Error" not in text and "Available tools" not in text and "Sorry" not in text


async def test_bound_is_never_exceeded_and_passthrough_returns_last_answer(fake, proxy):
    upstream, _ = fake
    # A different invalid call each time: an identical one would stop the ladder early
    # (repeated_failure, tests/http/test_budget_http.py).
    upstream.default = lambda _: Scripted(tool_call_completion(
        f"get_order_detail{'x' * upstream.calls}", GOOD))
    client = await proxy(max_repairs=3, on_exhausted="passthrough")
    status, answer, headers = await post(client, chat_body())
    assert status == 200 and upstream.calls == 4
    assert headers["x-reflexguard-attempts"] == "4"
    assert headers["x-reflexguard-violations"] == "4"
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == (
        "get_order_detailxxxx"
    )


async def test_on_exhausted_error_is_an_openai_error(fake, proxy):
    upstream, _ = fake
    upstream.default = invalid()
    client = await proxy(max_repairs=1, on_exhausted="error")
    status, answer, _ = await post(client, chat_body())
    assert status == 502 and upstream.calls == 2
    assert answer["error"]["code"] == "tool_call_repair_exhausted"
    assert set(answer["error"]) == {"message", "type", "param", "code"}


async def test_observe_mode_changes_nothing(fake, proxy, tmp_path: Path):
    upstream, _ = fake
    upstream.script = [invalid()]
    client = await proxy(repair=False)
    status, answer, headers = await post(client, chat_body())
    assert upstream.calls == 1 and status == 200
    assert answer == tool_call_completion("get_order_detail", GOOD)
    assert headers["x-reflexguard-violations"] == "1"
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[0]["calls"][0]["channel"] == "unknown_tool"


async def test_truncated_reply_is_not_re_asked(fake, proxy):
    upstream, _ = fake
    cut = tool_call_completion("get_order_details", '{"order_id": "#W12')
    cut["choices"][0]["finish_reason"] = "length"
    upstream.script = [Scripted(cut)]
    client = await proxy()
    await post(client, chat_body())
    assert upstream.calls == 1
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_fallbacks_total{kind="truncated_reply_not_repaired"} 1.0' in metrics


async def test_truncated_reply_gets_one_constrained_attempt_only(fake, proxy):
    upstream, _ = fake
    cut = tool_call_completion("get_order_details", '{"order_id": "#W12')
    cut["choices"][0]["finish_reason"] = "length"
    upstream.script = [Scripted(cut), invalid()]
    client = await proxy(max_repairs=3, constrained_retry="tool_choice")
    _, _, headers = await post(client, chat_body())
    assert upstream.calls == 2 and headers["x-reflexguard-attempts"] == "2"
    assert upstream.requests[1]["tool_choice"]["function"]["name"] == "get_order_details"
    metrics = await (await client.get("/metrics")).text()
    assert 'kind="truncated_reply_constrained_only"} 1.0' in metrics


async def test_deterministic_fix_costs_no_upstream_call(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(tool_call_completion(
        "get_order_detials", '{"order_id": "#W1234567", "detail": "full",'))]
    client = await proxy(snap_names=True, json_repair=True)
    _status, answer, headers = await post(client, chat_body())
    assert upstream.calls == 1 and headers["x-reflexguard-attempts"] == "1"
    call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_order_details" and json.loads(call["arguments"]) == GOOD
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_fixes_total{kind="name_snapped"} 1.0' in metrics
    assert 'reflexguard_fixes_total{kind="json_repaired"} 1.0' in metrics


async def test_constrained_last_attempt(fake, proxy):
    upstream, _ = fake
    upstream.script = [invalid(), invalid(), valid()]
    client = await proxy(max_repairs=2, constrained_retry="tool_choice")
    await post(client, chat_body())
    assert upstream.calls == 3
    assert "tool_choice" not in upstream.requests[1]
    assert upstream.requests[2]["tool_choice"] == {
        "type": "function", "function": {"name": "get_order_details"}}
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_repairs_total{dialect="chat",outcome="fixed_by_constrained"} 1.0' in metrics


async def test_response_format_retry_lifts_the_json_answer(fake, proxy):
    upstream, _ = fake
    as_json = json.dumps({"name": "get_order_details", "arguments": GOOD})
    upstream.script = [invalid(), Scripted(text_completion(as_json))]
    client = await proxy(max_repairs=1, constrained_retry="response_format")
    _, answer, _ = await post(client, chat_body())
    assert "response_format" in upstream.requests[1]
    message = answer["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"]["name"] == "get_order_details"


async def test_content_format_upstream_is_lifted_in_both_modes(fake, proxy):
    upstream, _ = fake
    written = '```json\n{"name": "get_order_details", "arguments": ' + json.dumps(GOOD) + "}\n```"
    upstream.default = Scripted(text_completion(written))
    for repair in (True, False):
        client = await proxy(tool_call_format="content", repair=repair)
        _status, answer, headers = await post(client, chat_body())
        message = answer["choices"][0]["message"]
        assert message["tool_calls"][0]["function"]["name"] == "get_order_details"
        assert answer["choices"][0]["finish_reason"] == "tool_calls"
        assert headers["x-reflexguard-violations"] == "0"


async def test_empty_and_vanished_replies_are_repaired(fake, proxy):
    upstream, _ = fake
    upstream.script = [
        Scripted(text_completion("")),
        Scripted(text_completion('<tool_call>{"name": "cancel_order", "arguments": {}}'
                                 "</tool_call>")),
        Scripted(tool_call_completion("cancel_order", {"order_id": "#W1234567"})),
    ]
    client = await proxy(max_repairs=2)
    _, answer, headers = await post(client, chat_body())
    assert upstream.calls == 3 and headers["x-reflexguard-violations"] == "2"
    assert upstream.requests[1]["messages"][-1]["role"] == "user"
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "cancel_order"


async def test_multiple_choices_are_counted_but_not_repaired(fake, proxy):
    upstream, _ = fake
    two = tool_call_completion("get_order_detail", GOOD)
    two["choices"].append({**two["choices"][0], "index": 1})
    upstream.script = [Scripted(two)]
    client = await proxy()
    _, _, headers = await post(client, chat_body(n=2))
    assert upstream.calls == 1 and headers["x-reflexguard-violations"] == "2"


async def test_upstream_error_during_repair_falls_back_to_last_answer(fake, proxy):
    upstream, _ = fake
    upstream.script = [invalid(), Scripted(status=500, body=b'{"error": {"message": "x"}}')]
    client = await proxy()
    status, answer, headers = await post(client, chat_body())
    assert status == 200 and headers["x-reflexguard-attempts"] == "2"
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == (
        "get_order_detail"
    )
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_fallbacks_total{kind="repair_upstream_error"} 1.0' in metrics


async def test_sessions_and_metrics(fake, proxy):
    upstream, _ = fake
    upstream.script = [invalid(), valid(), Scripted(completion_with_message(
        {"role": "assistant", "content": None}, "stop"))]
    client = await proxy(max_repairs=0)
    await post(client, chat_body(), **{"x-reflexguard-session": "ep-1"})
    await post(client, chat_body(user="ep-2"))
    await post(client, chat_body(user="ep-2"))
    one = await (await client.get("/reflexguard/sessions/ep-1")).json()
    two = await (await client.get("/reflexguard/sessions/ep-2")).json()
    assert one["violations"] == {"unknown_tool": 1}
    assert two["violations"] == {"empty_reply": 1}
    missing = await client.get("/reflexguard/sessions/none")
    assert missing.status == 404
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_tool_calls_total{channel="ok",dialect="chat",model="m"} 1.0' in metrics
    assert ('reflexguard_tool_calls_total{channel="unknown_tool",dialect="chat",model="m"} 1.0'
            in metrics)
    assert "reflexguard_upstream_seconds_bucket" in metrics
    assert "reflexguard_added_seconds_count 3.0" in metrics


async def test_authorization_is_forwarded_but_never_logged(fake, proxy, tmp_path: Path, capsys):
    upstream, _ = fake
    upstream.script = [invalid(), valid()]
    client = await proxy(upstream_api_key="sk-upstream-secret")
    await post(client, chat_body(), Authorization="Bearer sk-client-secret")
    logged = (tmp_path / "events.jsonl").read_text() + capsys.readouterr().err
    assert "secret" not in logged
    assert upstream.headers[0]["Authorization"] == "Bearer sk-upstream-secret"
    assert len(logged) > 0


async def test_ungrounded_identifier_is_caught_and_repaired(fake, proxy):
    upstream, _ = fake
    upstream.script = [
        Scripted(tool_call_completion("get_order_details",
                                      {"order_id": "#W0000000", "detail": "full"})),
        valid(),
    ]
    client = await proxy(grounding=True)
    _, answer, headers = await post(client, chat_body())
    assert headers["x-reflexguard-violations"] == "1" and upstream.calls == 2
    feedback = upstream.requests[1]["messages"][-1]["content"]
    assert "#W0000000" in feedback and "Do not invent identifiers" in feedback
    arguments = answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments)["order_id"] == "#W1234567"


@pytest.mark.parametrize("anthropic", [False, True])
async def test_an_identifier_only_a_failed_result_echoes_is_not_grounded(
        fake, proxy, anthropic: bool) -> None:
    """Seen on tau2 (docs/bench.md): the invented id came back in the environment's error
    and then passed as grounded. Chat's `Error:` results and Anthropic's is_error ones."""
    upstream, _ = fake
    upstream.script = [
        Scripted(tool_call_completion("get_order_details",
                                      {"order_id": "#W0000000", "detail": "full"})),
        valid(),
    ]
    # Messages translated to the chat-speaking fake, whose answers are chat completions.
    client = await proxy(grounding=True, upstream_dialects=["chat"])
    if anthropic:
        body: dict[str, Any] = {"model": "m", "max_tokens": 64, "tools": [
            {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
            for t in TOOLS], "messages": [
            {"role": "user", "content": "my order is #W1234567"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                               "name": "get_order_details", "input": {
                                                   "order_id": "#W0000000", "detail": "full"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "is_error": True,
                                          "content": "order #W0000000 not found"}]}]}
        response = await client.post("/v1/messages", json=body)
    else:
        body = chat_body(messages=[
            {"role": "user", "content": "my order is #W1234567"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function", "function": {
                    "name": "get_order_details",
                    "arguments": '{"order_id": "#W0000000", "detail": "full"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "Error: order #W0000000 not found"}])
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status == 200
    assert response.headers["x-reflexguard-violations"] == "1" and upstream.calls == 2


async def test_ungrounded_identifiers_are_never_forced_into_a_constrained_call(fake, proxy):
    upstream, _ = fake
    invented = Scripted(tool_call_completion("get_order_details",
                                             {"order_id": "#W0000000", "detail": "full"}))
    again = Scripted(tool_call_completion("get_order_details",  # not identical: no repeat
                                          {"order_id": "#W0000001", "detail": "full"}))
    upstream.script = [invented, again, Scripted(text_completion("What is your order id?"))]
    client = await proxy(grounding=True, max_repairs=2, constrained_retry="tool_choice")
    _, answer, _ = await post(client, chat_body())
    assert upstream.calls == 3
    assert all("tool_choice" not in r for r in upstream.requests)
    assert answer["choices"][0]["message"]["content"] == "What is your order id?"


async def test_on_exhausted_original_returns_the_first_answer_byte_for_byte(fake, proxy):
    upstream, _ = fake
    upstream.script = [invalid(), Scripted(tool_call_completion("nope", "{}")),
                       Scripted(tool_call_completion("nope_again", "{}"))]
    client = await proxy(on_exhausted="original")
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert upstream.calls == 3 and response.headers["x-reflexguard-attempts"] == "3"
    assert json.loads(await response.read()) == tool_call_completion("get_order_detail", GOOD)
