"""POST /v1/messages end to end: the official anthropic SDK -> reflexguard -> a scripted
native Messages upstream (or a chat-only one, translated), all on loopback sockets."""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import pytest

from tests.fakes.fake_upstream import Scripted, text_completion, tool_call_completion
from tests.fakes.native_replies import anthropic_call, anthropic_message, text_block
from tests.http.dialect_fixtures import GOOD, messages_body


def sdk(client: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=str(client.make_url("")), api_key="dummy",
                                    max_retries=0)


def valid() -> Scripted:
    return Scripted(anthropic_call("get_order_details", GOOD))


def unknown() -> Scripted:
    return Scripted(anthropic_call("get_order_detail", GOOD))


async def test_valid_call_is_the_upstreams_own_bytes(fake, proxy):
    upstream, _ = fake
    upstream.script = [valid()]
    client = await proxy()
    response = await client.post("/v1/messages?beta=true", json=messages_body(),
                                 headers={"anthropic-version": "2023-06-01",
                                          "anthropic-beta": "claude-code-20250219"})
    assert response.status == 200 and upstream.calls == 1
    assert json.loads(await response.read()) == anthropic_call("get_order_details", GOOD)
    assert response.headers["x-reflexguard-attempts"] == "1"
    assert upstream.paths == ["/v1/messages?beta=true"]
    assert upstream.headers[0]["anthropic-beta"] == "claude-code-20250219"
    assert upstream.headers[0]["anthropic-version"] == "2023-06-01"


async def test_sdk_create_gets_the_call(fake, proxy):
    upstream, _ = fake
    upstream.script = [valid()]
    message = await sdk(await proxy()).messages.create(**messages_body())
    assert message.stop_reason == "tool_use"
    block = message.content[0]
    assert block.type == "tool_use" and block.name == "get_order_details"
    assert block.input == GOOD


async def test_unknown_tool_is_reasked_natively_and_caller_body_untouched(fake, proxy):
    upstream, _ = fake
    upstream.script = [unknown(), valid()]
    body = messages_body(metadata={"user_id": "u-1"})
    body["system"] = [{"type": "text", "text": "You are a retail agent.",
                       "cache_control": {"type": "ephemeral"}}]
    # What Claude Code sends and this SDK version does not type: sent as extra body fields.
    extra = {"thinking": {"type": "adaptive"}, "context_management": {"edits": []},
             "output_config": {"effort": "high"}}
    snapshot = {**copy.deepcopy(body), **copy.deepcopy(extra)}
    message = await sdk(await proxy()).messages.create(**body, extra_body=extra)
    assert {**body, **extra} == snapshot and upstream.calls == 2
    assert message.content[-1].type == "tool_use"
    assert message.content[-1].name == "get_order_details"
    assert message.usage.input_tokens == 20  # both attempts billed
    reask = upstream.requests[1]
    for key in ("metadata", "thinking", "context_management", "output_config", "system"):
        assert reask[key] == snapshot[key]
    assistant, results = reask["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert assistant["content"][-1]["type"] == "tool_use"
    assert assistant["content"][-1]["name"] == "get_order_detail"
    assert results["role"] == "user"
    result = results["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert result["tool_use_id"] == assistant["content"][-1]["id"]
    assert "get_order_details" in result["content"]


async def test_vanished_call_is_repaired(fake, proxy):
    upstream, _ = fake
    text = json.dumps({"name": "get_order_details", "arguments": GOOD})
    upstream.script = [Scripted(anthropic_message(text_block(text))), valid()]
    message = await sdk(await proxy()).messages.create(**messages_body())
    assert upstream.calls == 2
    assert [b.type for b in message.content] == ["tool_use"]
    assert upstream.requests[1]["messages"][-1]["role"] == "user"


async def test_constrained_last_attempt_forces_the_tool(fake, proxy):
    upstream, _ = fake
    upstream.script = [unknown(), valid()]
    client = await proxy(max_repairs=1, constrained_retry="response_format")
    await sdk(client).messages.create(**messages_body())
    assert upstream.requests[1]["tool_choice"] == {"type": "tool", "name": "get_order_details"}
    metrics = await (await client.get("/metrics")).text()
    assert 'repairs_total{dialect="messages",outcome="fixed_by_constrained"} 1.0' in metrics
    assert 'channel="unknown_tool",dialect="messages",model="m"} 1.0' in metrics


async def test_exhausted_ladder_is_an_anthropic_error(fake, proxy):
    upstream, _ = fake
    upstream.default = unknown()
    with pytest.raises(anthropic.APIStatusError) as caught:
        await sdk(await proxy(on_exhausted="error")).messages.create(**messages_body())
    # the same call again: the repeat stops the ladder (repeated_failure), then as exhausted
    assert caught.value.status_code == 502 and upstream.calls == 2
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    assert "unknown_tool" in caught.value.body["error"]["message"]  # type: ignore[index]


async def test_exhausted_passthrough_returns_the_last_reply(fake, proxy):
    upstream, _ = fake
    upstream.default = unknown()
    message = await sdk(await proxy()).messages.create(**messages_body())
    # the same call again: the repeat stops the ladder (repeated_failure), then as exhausted
    assert upstream.calls == 2 and message.content[-1].name == "get_order_detail"


async def test_malformed_input_schema_is_a_400_naming_the_tool(fake, proxy):
    body = messages_body()
    body["tools"][1]["input_schema"] = {"type": "object", "properties": {"x": {"type": 7}}}
    client = await proxy()
    response = await client.post("/v1/messages", json=body)
    assert response.status == 400
    error = await response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "cancel_order" in error["error"]["message"]
    assert "tools.1.input_schema" in error["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        await sdk(client).messages.create(**body)


async def test_bad_envelope_is_an_anthropic_400(fake, proxy):
    client = await proxy()
    response = await client.post("/v1/messages", data=b"[1]")
    assert response.status == 400
    assert (await response.json())["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("script", ["valid", "repaired"])
async def test_sdk_stream_accepts_held_and_repaired_calls(fake, proxy, script):
    upstream, _ = fake
    upstream.script = [valid()] if script == "valid" else [unknown(), valid()]
    async with sdk(await proxy()).messages.stream(**messages_body()) as stream:
        events = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_start" in events and "input_json" in events
    assert final.stop_reason == "tool_use"
    assert final.content[-1].type == "tool_use" and final.content[-1].input == GOOD
    assert upstream.requests[0]["stream"] is True  # the first answer is streamed
    assert all("stream" not in r for r in upstream.requests[1:])  # re-asks are not


async def test_text_streams_at_once_and_the_call_follows_repaired(fake, proxy):
    upstream, _ = fake
    first = anthropic_call("get_order_detail", GOOD, text="Let me look that order up.")
    upstream.script = [Scripted(first), valid()]
    async with sdk(await proxy()).messages.stream(**messages_body()) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_message()
    texts = [e.delta.text for e in events if e.type == "content_block_delta"
             and e.delta.type == "text_delta"]
    assert len(texts) > 1  # the upstream's deltas went through one by one
    assert "".join(texts) == "Let me look that order up."
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].name == "get_order_details" and final.content[1].input == GOOD


async def test_text_stream_through_sdk(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(anthropic_message(text_block("Hello there.")))]
    async with sdk(await proxy()).messages.stream(**messages_body()) as stream:
        text = "".join([t async for t in stream.text_stream])
    assert text == "Hello there."


# -- translated: a chat-only upstream -------------------------------------------------------


async def test_translated_upstream_gets_chat_and_agent_gets_messages(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(tool_call_completion("get_order_detail", GOOD)),
                       Scripted(tool_call_completion("get_order_details", GOOD,
                                                     call_id="call_9"))]
    client = await proxy(upstream_dialects=["chat"])
    body = messages_body()
    body["messages"].insert(0, {"role": "system", "content": "Claude Code puts one here."})
    message = await sdk(client).messages.create(**body)
    assert upstream.paths == ["/v1/chat/completions"] * 2
    first = upstream.requests[0]
    assert first["messages"][0] == {"role": "system", "content": "You are a retail agent."}
    assert first["tools"][0]["function"]["name"] == "get_order_details"
    assert upstream.requests[1]["messages"][-1]["role"] == "tool"
    assert message.content[-1].type == "tool_use" and message.content[-1].id == "call_9"
    assert message.content[-1].input == GOOD and message.stop_reason == "tool_use"


async def test_translated_stream_and_plain_text(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(tool_call_completion("get_order_details", GOOD)),
                       Scripted(text_completion("Done."))]
    client = await proxy(upstream_dialects=["chat"])
    async with sdk(client).messages.stream(**messages_body()) as stream:
        final = await stream.get_final_message()
    assert final.content[-1].input == GOOD
    body = messages_body()
    del body["tools"]
    message = await sdk(client).messages.create(**body)
    assert message.content[0].text == "Done." and message.stop_reason == "end_turn"


async def test_stream_holds_a_call_written_as_text_and_repairs_it(fake, proxy):
    upstream, _ = fake
    text = json.dumps({"name": "get_order_details", "arguments": GOOD})
    upstream.script = [Scripted(anthropic_message(text_block(text))), valid()]
    async with sdk(await proxy()).messages.stream(**messages_body()) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_message()
    assert not [e for e in events if e.type == "text"]  # the text call never leaked
    assert [b.type for b in final.content] == ["tool_use"]


async def test_native_upstream_error_passes_through_and_others_are_anthropic(fake, proxy):
    upstream, _ = fake
    native_error = b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}'
    upstream.script = [Scripted(status=529, body=native_error),
                       Scripted(status=500, body=b"<html>oops</html>")]
    client = await proxy()
    first = await client.post("/v1/messages", json=messages_body())
    assert first.status == 529 and await first.read() == native_error
    second = await client.post("/v1/messages", json=messages_body())
    assert second.status == 500
    error = await second.json()
    assert error["type"] == "error" and "oops" in error["error"]["message"]


async def test_stream_exhausted_with_error_is_a_json_502_before_any_byte(fake, proxy):
    upstream, _ = fake
    upstream.default = unknown()
    response = await (await proxy(on_exhausted="error")).post(
        "/v1/messages", json=messages_body(stream=True))
    assert response.status == 502
    assert (await response.json())["error"]["type"] == "api_error"


async def test_translated_stream_without_tools_streams_text_at_once(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(text_completion("A title for this chat."))]
    body = messages_body()
    del body["tools"]
    async with sdk(await proxy(upstream_dialects=["chat"])).messages.stream(**body) as stream:
        pieces = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == "A title for this chat."
    assert final.content[0].text == "A title for this chat."
    assert upstream.requests[0]["stream"] is True
