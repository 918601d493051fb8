"""`responses.create` on a guarded `openai` client, against the fake upstream serving
/v1/responses natively: guarded as the proxy's native Responses mode guards it."""

from __future__ import annotations

import copy
import json
from typing import Any

import openai
import pytest
from openai.types.responses import Response

import reflexguard
from reflexguard.api import RepairExhausted
from reflexguard.api.openai_client import GuardedClient
from tests.api.test_openai_guard import counted
from tests.fakes.fake_upstream import FakeUpstream, Scripted
from tests.fakes.native_replies import function_call, message_item, openai_response
from tests.http.dialect_fixtures import ASK, GOOD, responses_body


def _client(url: str, **policy: Any) -> GuardedClient:
    return reflexguard.guard(openai.OpenAI(base_url=url, api_key="k", max_retries=0), **policy)


def _script(fake: FakeUpstream, *replies: dict[str, Any]) -> None:
    fake.script.extend(Scripted(completion=r) for r in replies)


def _calls(response: Response) -> list[Any]:
    return [item for item in response.output if item.type == "function_call"]


def test_valid_call_is_the_sdks_own_response_with_no_extra_call(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, openai_response(function_call("get_order_details", GOOD)))
    response = _client(url).responses.create(**responses_body())
    assert isinstance(response, Response)
    (call,) = _calls(response)
    assert call.name == "get_order_details" and json.loads(call.arguments) == GOOD
    assert fake.calls == 1 and fake.paths == ["/v1/responses"]


def test_unknown_tool_is_reasked_natively_and_the_callers_input_is_untouched(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, openai_response(function_call("get_order_detail", GOOD)),
            openai_response(message_item("Fixed."),
                            function_call("get_order_details", GOOD, call_id="call_2")))
    items = [{"type": "message", "role": "user", "content": ASK}]
    body = responses_body(input=items)
    snapshot = copy.deepcopy(body)
    client = _client(url)
    response = client.responses.create(**body)
    assert body == snapshot and body["input"] is items and len(items) == 1
    assert isinstance(response, Response)
    assert fake.calls == 2 and fake.paths == ["/v1/responses", "/v1/responses"]
    (call,) = _calls(response)
    assert call.name == "get_order_details" and json.loads(call.arguments) == GOOD
    assert call.call_id == "call_2"
    assert all(item.type != "message" for item in response.output)  # repair prose dropped
    assert response.usage is not None and response.usage.input_tokens == 20
    reask = fake.requests[1]["input"]
    assert reask[0] == items[0]
    kinds = [item["type"] for item in reask[1:]]
    assert kinds == ["function_call", "function_call_output"]
    assert reask[1]["name"] == "get_order_detail"
    assert reask[2]["call_id"] == reask[1]["call_id"]
    assert counted(client.guard.telemetry.metrics_text(), "repairs",
                   'outcome="fixed_by_reask"')


async def test_async_client_repairs_invalid_arguments(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, openai_response(function_call("get_order_details", '{"order_id": 7}')),
            openai_response(function_call("get_order_details", GOOD)))
    client = reflexguard.guard(openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0))
    response = await client.responses.create(**responses_body())
    assert isinstance(response, Response)
    assert json.loads(_calls(response)[0].arguments) == GOOD
    assert fake.calls == 2
    assert fake.requests[1]["input"][-1]["type"] == "function_call_output"


def test_exhausted_ladder_raises_with_the_constrained_last_attempt_in_native_form(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.default = Scripted(completion=openai_response(function_call("get_order_detail", GOOD)))
    client = _client(url, max_repairs=2, on_exhausted="error", constrained_retry="tool_choice")
    with pytest.raises(RepairExhausted, match="unknown_tool"):
        client.responses.create(**responses_body())
    assert fake.calls == 3
    assert "tool_choice" not in fake.requests[1]
    assert fake.requests[2]["tool_choice"] in ("required", {
        "type": "function", "name": "get_order_details"})


def test_stream_is_guarded_in_process_as_the_sdks_own_events(
        upstream: tuple[FakeUpstream, str]) -> None:
    """Guarded as the proxy guards it (issue 19; it used to pass through unguarded): the
    SDK's own event types, the repaired call in response.completed, re-asked unstreamed."""
    fake, url = upstream
    _script(fake, openai_response(function_call("get_order_detail", GOOD)),
            openai_response(function_call("get_order_details", GOOD, call_id="call_2")))
    client = _client(url)
    with client.responses.create(stream=True, **responses_body()) as stream:
        events = list(stream)
    assert all(type(e).__module__.startswith("openai.types.responses") for e in events)
    assert events[-1].type == "response.completed"
    (call,) = _calls(events[-1].response)
    assert call.name == "get_order_details" and json.loads(call.arguments) == GOOD
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert fake.calls == 2 and fake.requests[0]["stream"] is True
    assert "stream" not in fake.requests[1]
    assert counted(client.guard.telemetry.metrics_text(), "fallbacks",
                   'kind="stream_not_guarded_inprocess"') == 0


def test_chat_completions_still_guarded_beside_responses(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, openai_response(function_call("get_order_details", GOOD)))
    client = _client(url)
    assert callable(client.responses.retrieve)  # the resource's other methods are its own
    assert isinstance(client.responses.create(**responses_body()), Response)
    assert client.chat.completions is not None and fake.calls == 1


def test_a_failed_replys_reasoning_is_echoed_in_the_reask_as_by_the_proxy(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [],
                 "encrypted_content": "opaque"}
    _script(fake, openai_response(reasoning, function_call("get_order_detail", GOOD)),
            openai_response(function_call("get_order_details", GOOD)))
    response = _client(url).responses.create(**responses_body())
    assert _calls(response)[0].name == "get_order_details" and fake.calls == 2
    reask = fake.requests[1]["input"]
    assert [item["type"] for item in reask] == [
        "message", "reasoning", "function_call", "function_call_output"]
    assert reask[1] == reasoning
