"""The error budget and repeated identical failures through the proxy: a fake upstream on
loopback behind the real HTTP client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reflexguard.core.choice import WITHHELD_TEXT
from reflexguard.core.toolset import CompileNeeded
from reflexguard.dialects.chat_request import CHAT
from reflexguard.dialects.reader import read_request
from reflexguard.http.app import GUARD_KEY
from reflexguard.http.call import GuardedCall
from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.native_replies import anthropic_call, function_call, openai_response, tool_use
from tests.http.dialect_fixtures import messages_body, responses_body

GOOD = {"order_id": "#W1234567", "detail": "full"}
INVENTED = {"order_id": "#W7654321", "detail": "full"}
BUDGET = "x-reflexguard-error-budget"
REMAINING = "x-reflexguard-budget-remaining"


def call(name: str = "get_order_details", arguments: dict[str, Any] | None = None,
         content: str | None = None) -> Scripted:
    return Scripted(tool_call_completion(name, arguments or GOOD, content=content))


def failed_turns(count: int) -> list[dict[str, Any]]:
    """`count` earlier calls whose results reported an error, as tau2 writes them."""
    turns: list[dict[str, Any]] = []
    for index in range(count):
        turns.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"e{index}", "type": "function",
             "function": {"name": "cancel_order", "arguments": "{}"}}]})
        turns.append({"role": "tool", "tool_call_id": f"e{index}",
                      "content": "Error: order_id is required"})
    return turns


def conversation(spent: int) -> dict[str, Any]:
    body = chat_body()
    body["messages"] = [*body["messages"], *failed_turns(spent)]
    return body


def events(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


async def post(client: Any, body: dict[str, Any], **headers: str) -> tuple[int, Any, Any]:
    response = await client.post("/v1/chat/completions", json=body, headers=headers)
    return response.status, await response.json(), response.headers


async def test_without_a_budget_nothing_changes_and_no_header_is_added(fake, proxy):
    upstream, _ = fake
    upstream.script = [call("get_order_detail"), call("get_order_detail")]
    client = await proxy(max_repairs=1)
    status, body, headers = await post(client, conversation(5))
    assert status == 200 and REMAINING not in headers
    # passthrough as before: the agent gets the invalid call
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "get_order_detail"


async def test_a_bad_budget_header_is_an_openai_style_400(fake, proxy):
    upstream, _ = fake
    client = await proxy()
    status, body, _ = await post(client, chat_body(), **{BUDGET: "lots"})
    assert status == 400 and upstream.calls == 0
    assert body["error"]["code"] == "invalid_error_budget"
    assert body["error"]["param"] == BUDGET


async def test_the_remaining_budget_is_said_in_a_header(fake, proxy):
    upstream, _ = fake
    upstream.script = [call()]
    client = await proxy()
    status, _, headers = await post(client, conversation(2), **{BUDGET: "10"})
    assert status == 200 and headers[REMAINING] == "8"


async def test_the_setting_is_the_budget_when_no_header_says_one(fake, proxy):
    upstream, _ = fake
    upstream.script = [call(), call()]
    client = await proxy(error_budget=4)
    _, _, headers = await post(client, conversation(1))
    assert headers[REMAINING] == "3"
    _, _, headers = await post(client, conversation(1), **{BUDGET: "2"})
    assert headers[REMAINING] == "1"  # the header wins


async def test_the_tool_error_pattern_is_configurable(fake, proxy):
    upstream, _ = fake
    upstream.script = [call()]
    client = await proxy(error_budget=4, tool_error_pattern="^Failure")
    _, _, headers = await post(client, conversation(3))
    assert headers[REMAINING] == "4"


async def test_with_one_left_an_invalid_call_is_withheld(fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.default = call("get_order_detail", content="Let me check that order.")
    client = await proxy(max_repairs=1)
    status, body, headers = await post(client, conversation(2), **{BUDGET: "3"})
    assert status == 200 and headers[REMAINING] == "1"
    message = body["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"] == "Let me check that order."
    assert body["choices"][0]["finish_reason"] == "stop"
    assert upstream.calls == 2  # the first answer and one re-ask; then the repeat stopped it
    metrics = await (await client.get("/metrics")).text()
    assert 'kind="invalid_call_withheld"} 1.0' in metrics
    kinds = {e.get("kind") for e in events(tmp_path) if e["event"] == "fallback"}
    assert "invalid_call_withheld" in kinds


async def test_with_plenty_left_the_invalid_call_passes_as_configured(fake, proxy):
    upstream, _ = fake
    upstream.default = call("get_order_detail")
    client = await proxy(max_repairs=1)
    _, body, headers = await post(client, conversation(2), **{BUDGET: "10"})
    assert headers[REMAINING] == "8"
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "get_order_detail"


async def test_with_two_left_an_invented_id_is_caught_and_re_asked(fake, proxy):
    upstream, _ = fake
    upstream.script = [call(arguments=INVENTED), call()]
    client = await proxy()  # grounding off in the settings
    _, body, headers = await post(client, conversation(1), **{BUDGET: "3"})
    assert headers[REMAINING] == "2" and upstream.calls == 2
    assert "#W7654321" in upstream.requests[1]["messages"][-1]["content"]
    arguments = body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == GOOD


async def test_with_plenty_left_an_invented_id_is_not_checked(fake, proxy):
    upstream, _ = fake
    upstream.script = [call(arguments=INVENTED)]
    client = await proxy()
    _, _, headers = await post(client, conversation(1), **{BUDGET: "10"})
    assert upstream.calls == 1 and headers["x-reflexguard-violations"] == "0"


async def test_with_two_left_there_is_one_more_re_ask_and_it_is_constrained_earlier(
        fake, proxy):
    upstream, _ = fake
    upstream.script = [call("get_order_detail"), call("get_order_detailz"),
                       call("get_order_detaill"), call()]
    client = await proxy(max_repairs=2, constrained_retry="tool_choice")
    _, body, headers = await post(client, conversation(1), **{BUDGET: "3"})
    assert upstream.calls == 4 and headers["x-reflexguard-attempts"] == "4"
    assert ["tool_choice" in r for r in upstream.requests] == [False, False, True, True]
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "get_order_details"


async def test_a_repeated_identical_failure_stops_and_is_its_own_outcome(fake, proxy,
                                                                         tmp_path):
    upstream, _ = fake
    upstream.default = call("get_order_detail")
    client = await proxy(max_repairs=3)
    status, _, headers = await post(client, chat_body())
    assert status == 200 and upstream.calls == 2 and headers["x-reflexguard-attempts"] == "2"
    outcomes = [e["outcome"] for e in events(tmp_path) if e["event"] == "outcome"]
    assert outcomes == ["repeated_failure"]
    metrics = await (await client.get("/metrics")).text()
    assert 'outcome="repeated_failure"} 1.0' in metrics


async def test_a_repeat_with_on_exhausted_error_is_the_usual_502(fake, proxy):
    upstream, _ = fake
    upstream.default = call("get_order_detail")
    client = await proxy(max_repairs=3, on_exhausted="error")
    status, body, _ = await post(client, chat_body())
    assert status == 502 and body["error"]["code"] == "tool_call_repair_exhausted"


async def test_a_repeat_goes_to_the_constrained_attempt_when_configured(fake, proxy):
    upstream, _ = fake
    upstream.script = [call("get_order_detail"), call("get_order_detail"), call()]
    client = await proxy(max_repairs=5, constrained_retry="tool_choice")
    status, _, _ = await post(client, chat_body())
    assert status == 200 and upstream.calls == 3
    assert upstream.requests[2]["tool_choice"]["function"]["name"] == "get_order_details"


# -- streams and dialects -------------------------------------------------------------------


def sse_data(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]


async def test_a_stream_carries_the_remaining_budget_and_withholds_at_one_left(fake, proxy):
    upstream, _ = fake
    upstream.default = call("get_order_detail", content="Let me check that order.")
    client = await proxy(max_repairs=1)
    response = await client.post("/v1/chat/completions", json=conversation(2) | {"stream": True},
                                 headers={BUDGET: "3"})
    assert response.status == 200 and response.headers[REMAINING] == "1"
    chunks = sse_data(await response.text())
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    assert "".join(d.get("content") or "" for d in deltas) == "Let me check that order."
    assert not any("tool_calls" in d for d in deltas)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_a_withheld_stream_without_text_says_the_short_question(fake, proxy):
    upstream, _ = fake
    upstream.default = call("get_order_detail")
    client = await proxy(max_repairs=1)
    response = await client.post("/v1/chat/completions", json=conversation(2) | {"stream": True},
                                 headers={BUDGET: "3"})
    deltas = [c["choices"][0]["delta"] for c in sse_data(await response.text())
              if c.get("choices")]
    assert "".join(d.get("content") or "" for d in deltas) == WITHHELD_TEXT


def messages_conversation(spent: int) -> dict[str, Any]:
    body = messages_body()
    for index in range(spent):
        body["messages"] += [
            {"role": "assistant", "content": [tool_use("cancel_order", {}, f"t{index}")]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{index}",
                                          "is_error": True, "content": "order_id missing"}]}]
    return body


async def test_messages_counts_is_error_results_and_withholds_at_one_left(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(anthropic_call("get_order_detail", GOOD, text="Checking."))
    client = await proxy(max_repairs=1)
    response = await client.post("/v1/messages", json=messages_conversation(2),
                                 headers={BUDGET: "3"})
    reply = await response.json()
    assert response.status == 200 and response.headers[REMAINING] == "1"
    assert reply["content"] == [{"type": "text", "text": "Checking."}]
    assert reply["stop_reason"] == "end_turn"


async def test_messages_bad_budget_is_said_in_anthropics_error_format(fake, proxy):
    client = await proxy()
    response = await client.post("/v1/messages", json=messages_body(),
                                 headers={BUDGET: "0"})
    reply = await response.json()
    assert response.status == 400 and reply["type"] == "error"
    assert reply["error"]["type"] == "invalid_request_error"
    assert BUDGET in reply["error"]["message"]


async def test_a_translated_messages_stream_carries_the_remaining_budget(fake, proxy):
    upstream, _ = fake
    upstream.script = [call()]
    client = await proxy(upstream_dialects=["chat"])
    response = await client.post("/v1/messages", json=messages_conversation(1) | {"stream": True},
                                 headers={BUDGET: "4"})
    text = await response.text()
    assert response.status == 200 and response.headers[REMAINING] == "3"
    assert "tool_use" in text


async def test_responses_counts_matching_outputs(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(openai_response(function_call("get_order_details", GOOD)))
    client = await proxy()
    body = responses_body(input=[
        {"type": "message", "role": "user", "content": "Show me order #W1234567 in full."},
        {"type": "function_call", "call_id": "c1", "name": "cancel_order", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "Error: missing id"},
        {"type": "function_call", "call_id": "c2", "name": "cancel_order", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "cancelled"}])
    response = await client.post("/v1/responses", json=body, headers={BUDGET: "5"})
    assert response.status == 200 and response.headers[REMAINING] == "4"
    response = await client.post("/v1/responses", json=body | {"stream": True},
                                 headers={BUDGET: "2"})
    assert response.headers[REMAINING] == "1"
    assert b"response.completed" in await response.read()


async def test_the_call_records_the_failures_the_environment_reported(fake, proxy):
    client = await proxy()
    routes = client.server.app[GUARD_KEY]
    raw = json.dumps(conversation(2)).encode()
    try:
        chat = read_request(raw, CHAT, routes.toolsets, routes.grounding)
    except CompileNeeded as miss:  # a new tool set compiles off the loop, as the edge does
        await routes.compile_tools(miss)
        chat = read_request(raw, CHAT, routes.toolsets, routes.grounding)
    call = GuardedCall(routes, chat, b"", {}, None, 0.0)
    assert call.environment_errors == 0 and call.budget_headers() == {}
    call.read_budget(None)  # no header, no setting: nothing is read
    assert call.environment_errors == 0 and call.policy is routes.policy
    call.read_budget("5")
    assert call.environment_errors == 2 and call.budget_headers() == {REMAINING: "3"}


async def test_a_native_messages_stream_withholds_at_one_left(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(anthropic_call("get_order_detail", GOOD, text="Checking."))
    client = await proxy(max_repairs=1)
    response = await client.post("/v1/messages", json=messages_conversation(2) | {"stream": True},
                                 headers={BUDGET: "3"})
    events = sse_data(await response.text())
    assert response.headers[REMAINING] == "1"
    assert not any(e.get("content_block", {}).get("type") == "tool_use" for e in events)
    text = "".join(e["delta"].get("text", "") for e in events
                   if e.get("type") == "content_block_delta")
    assert text == "Checking."
    stops = [e["delta"]["stop_reason"] for e in events if e.get("type") == "message_delta"]
    assert stops == ["end_turn"]
