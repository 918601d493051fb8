"""`reflexguard.guard` around the real `anthropic` SDK clients, against the fake upstream
serving /v1/messages natively: guarded as the proxy's native Messages mode guards it."""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import pytest
from anthropic.types import Message

import reflexguard
from reflexguard.api import RepairExhausted
from reflexguard.api.anthropic_client import GuardedAnthropic
from tests.api.test_openai_guard import counted
from tests.fakes.fake_upstream import FakeUpstream, Scripted
from tests.fakes.native_replies import anthropic_call, anthropic_message, text_block
from tests.http.dialect_fixtures import GOOD, messages_body


def _client(url: str, **policy: Any) -> GuardedAnthropic:
    return reflexguard.guard(anthropic.Anthropic(base_url=url.removesuffix("/v1"),
                                                 api_key="k", max_retries=0), **policy)


def _script(fake: FakeUpstream, *replies: dict[str, Any]) -> None:
    fake.script.extend(Scripted(completion=r) for r in replies)


def test_valid_call_is_the_sdks_own_message_with_no_extra_call(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_call("get_order_details", GOOD))
    client = _client(url)
    message = client.messages.create(**messages_body())
    assert isinstance(message, Message)
    assert message.stop_reason == "tool_use"
    block = message.content[0]
    assert block.type == "tool_use" and block.name == "get_order_details"
    assert block.input == GOOD
    assert fake.calls == 1 and fake.paths == ["/v1/messages"]


def test_unknown_tool_is_reasked_natively_and_the_callers_body_is_untouched(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_call("get_order_detail", GOOD),
            anthropic_call("get_order_details", GOOD, call_id="toolu_2", text="Fixed."))
    body = messages_body(metadata={"user_id": "u-1"})
    messages = body["messages"]
    snapshot = copy.deepcopy(body)
    client = _client(url)
    message = client.messages.create(**body)
    assert body == snapshot and body["messages"] is messages and len(messages) == 1
    assert isinstance(message, Message)
    assert fake.calls == 2 and fake.paths == ["/v1/messages", "/v1/messages"]
    call = message.content[-1]
    assert call.type == "tool_use" and call.name == "get_order_details"
    assert call.input == GOOD
    assert all(b.type != "text" for b in message.content)  # the repair's prose is dropped
    assert message.usage.input_tokens == 20  # both attempts billed
    reask = fake.requests[1]
    assert reask["metadata"] == {"user_id": "u-1"} and reask["system"] == snapshot["system"]
    assistant, results = reask["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert assistant["content"][-1]["type"] == "tool_use"
    assert assistant["content"][-1]["name"] == "get_order_detail"
    assert results["role"] == "user"
    assert results["content"][0]["type"] == "tool_result"
    assert results["content"][0]["is_error"] is True
    metrics = client.guard.telemetry.metrics_text()
    assert counted(metrics, "repairs", 'outcome="fixed_by_reask"')
    assert 'dialect="messages"' in metrics.decode()


async def test_async_client_repairs_invalid_arguments(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_call("get_order_details", {"order_id": 7}),
            anthropic_call("get_order_details", GOOD))
    client = reflexguard.guard(anthropic.AsyncAnthropic(base_url=url.removesuffix("/v1"),
                                                        api_key="k", max_retries=0))
    message = await client.messages.create(**messages_body())
    assert isinstance(message, Message)
    assert message.content[-1].type == "tool_use" and message.content[-1].input == GOOD
    assert fake.calls == 2
    assert fake.requests[1]["messages"][-1]["content"][0]["type"] == "tool_result"


def test_exhausted_ladder_raises_with_the_constrained_last_attempt_in_native_form(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.default = Scripted(completion=anthropic_call("get_order_detail", GOOD))
    client = _client(url, max_repairs=2, on_exhausted="error", constrained_retry="tool_choice")
    with pytest.raises(RepairExhausted, match="unknown_tool") as raised:
        client.messages.create(**messages_body())
    # the same call again: a repeat, which goes straight to the constrained attempt
    assert raised.value.result.outcome == "repeated_failure"
    assert fake.calls == 3
    assert "tool_choice" not in fake.requests[1]
    assert fake.requests[2]["tool_choice"]["type"] in ("tool", "any")


def test_exhausted_ladder_passes_the_last_answer_through_by_default(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.default = Scripted(completion=anthropic_call("get_order_detail", GOOD))
    message = _client(url, max_repairs=1).messages.create(**messages_body())
    assert isinstance(message, Message) and fake.calls == 2
    assert message.content[-1].type == "tool_use"


def test_text_reply_when_a_tool_is_required_is_reasked(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_message(text_block("I will look it up.")),
            anthropic_call("get_order_details", GOOD))
    message = _client(url).messages.create(**messages_body(tool_choice={"type": "any"}))
    assert message.content[-1].type == "tool_use" and fake.calls == 2


def test_stream_is_guarded_in_process_as_the_sdks_own_events(
        upstream: tuple[FakeUpstream, str]) -> None:
    """Guarded as the proxy guards it (issue 19; it used to pass through unguarded)."""
    fake, url = upstream
    _script(fake, anthropic_call("get_order_detail", GOOD),
            anthropic_call("get_order_details", GOOD, call_id="toolu_2"))
    client = _client(url)
    with client.messages.create(stream=True, **messages_body()) as stream:
        events = list(stream)
    assert all(type(e).__module__.startswith("anthropic.types") for e in events)
    assert events[-1].type == "message_stop"
    names = [e.content_block.name for e in events if e.type == "content_block_start"
             and e.content_block.type == "tool_use"]
    assert names == ["get_order_details"]
    assert fake.calls == 2 and fake.requests[0]["stream"] is True
    assert counted(client.guard.telemetry.metrics_text(), "fallbacks",
                   'kind="stream_not_guarded_inprocess"') == 0


async def test_async_stream_is_guarded_in_process(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_call("get_order_detail", GOOD),
            anthropic_call("get_order_details", GOOD, call_id="toolu_2"))
    client = reflexguard.guard(anthropic.AsyncAnthropic(base_url=url.removesuffix("/v1"),
                                                        api_key="k", max_retries=0))
    stream = await client.messages.create(stream=True, **messages_body())
    names = [e.content_block.name async for e in stream if e.type == "content_block_start"
             and e.content_block.type == "tool_use"]
    assert names == ["get_order_details"] and fake.calls == 2


def test_a_request_without_tools_goes_straight_through(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_message(text_block("Hello.")))
    body = messages_body()
    body.pop("tools")
    message = _client(url).messages.create(**body)
    assert message.content[0].type == "text" and fake.calls == 1


def test_other_attributes_and_with_options_are_the_clients(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_call("get_order_detail", GOOD),
            anthropic_call("get_order_details", GOOD))
    client = _client(url)
    assert client.api_key == "k"
    assert callable(client.messages.count_tokens)
    message = client.with_options(timeout=30).messages.create(**messages_body())
    assert message.content[-1].name == "get_order_details" and fake.calls == 2


def test_a_failed_replys_thinking_is_echoed_in_the_reask_as_by_the_proxy(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    thinking = {"type": "thinking", "thinking": "The user wants order details.",
                "signature": "sig-1"}
    failed = anthropic_call("get_order_detail", GOOD)
    failed["content"].insert(0, thinking)
    _script(fake, failed, anthropic_call("get_order_details", GOOD))
    body = messages_body(thinking={"type": "enabled", "budget_tokens": 1024})
    message = _client(url).messages.create(**body)
    assert message.content[-1].name == "get_order_details" and fake.calls == 2
    assistant = fake.requests[1]["messages"][-2]
    assert assistant["content"][0] == thinking
    assert assistant["content"][-1]["type"] == "tool_use"


def test_a_streamed_failed_replys_thinking_is_echoed_and_streamed_through(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    thinking = {"type": "thinking", "thinking": "The user wants order details.",
                "signature": "sig-1"}
    failed = anthropic_call("get_order_detail", GOOD)
    failed["content"].insert(0, thinking)
    _script(fake, failed, anthropic_call("get_order_details", GOOD))
    body = messages_body(thinking={"type": "enabled", "budget_tokens": 1024})
    with _client(url).messages.create(stream=True, **body) as stream:
        events = list(stream)
    deltas = [e.delta.thinking for e in events if e.type == "content_block_delta"
              and e.delta.type == "thinking_delta"]
    assert "".join(deltas) == thinking["thinking"] and fake.calls == 2
    assistant = fake.requests[1]["messages"][-2]
    assert assistant["content"][0] == thinking
    assert assistant["content"][-1]["type"] == "tool_use"


def test_a_request_reflexguard_cannot_read_goes_unguarded_and_is_counted(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_call("get_order_detail", GOOD))
    client = _client(url)
    bad = [{"name": "x", "input_schema": {"type": 7}}]
    message = client.messages.create(**messages_body(tools=bad))
    assert message.content[-1].name == "get_order_detail" and fake.calls == 1
    assert counted(client.guard.telemetry.metrics_text(), "fallbacks",
                   'kind="request_not_guarded"')


class _Subclassed(anthropic.Anthropic):
    pass


def test_a_subclass_of_the_anthropic_client_is_guarded_as_one(
        upstream: tuple[FakeUpstream, str]) -> None:
    _, url = upstream
    client = reflexguard.guard(_Subclassed(base_url=url.removesuffix("/v1"), api_key="k"))
    assert isinstance(client, GuardedAnthropic)
