"""Streaming: the assembler's decisions, and the real server read by the openai client."""

from __future__ import annotations

import json
from typing import Any

import openai

from reflexguard.dialects.chat_stream import StreamAssembler
from tests.conftest import chat_body
from tests.fakes.fake_upstream import (
    Scripted,
    stream_chunks,
    text_completion,
    tool_call_completion,
)

GOOD = {"order_id": "#W1234567", "detail": "full"}


def feed_all(assembler: StreamAssembler, completion: dict[str, Any]) -> list[bool]:
    return [assembler.feed(chunk) for chunk in stream_chunks(completion, include_usage=True)]


def test_text_passes_at_once_and_calls_are_held() -> None:
    assembler = StreamAssembler()
    forwarded = feed_all(assembler, text_completion("Hello there, your order shipped."))
    assert forwarded[:3] == [True, True, True]
    assert forwarded[-2:] == [False, False]  # finish and usage are written by the proxy
    calls = StreamAssembler()
    forwarded = feed_all(calls, tool_call_completion("cancel_order", {"order_id": "1"}))
    assert forwarded[0] is True and not any(forwarded[1:])
    assert calls.reply().tool_calls[0].arguments == '{"order_id": "1"}'
    assert calls.usage is not None and calls.finish_reason == "tool_calls"


def test_text_that_may_open_a_call_is_held() -> None:
    assembler = StreamAssembler()
    forwarded = feed_all(assembler, text_completion('{"name": "a", "arguments": {}}'))
    assert not any(forwarded[1:])
    assert assembler.held_text == '{"name": "a", "arguments": {}}'


def test_held_whitespace_is_flushed_before_text() -> None:
    assembler = StreamAssembler()
    base = {"id": "x", "created": 1, "model": "m"}
    assert assembler.feed({**base, "choices": [{"index": 0, "delta": {"content": "  "}}]}) is False
    assert assembler.feed({**base, "choices": [{"index": 0, "delta": {"content": "Hi"}}]}) is False
    assert assembler.pending_flush == "  Hi"
    assert assembler.feed({**base, "choices": [{"index": 0, "delta": {"content": "!"}}]}) is True


def client_for(proxy_client: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(proxy_client.make_url("/v1")), api_key="sk-test",
                              max_retries=0)


async def collect(stream: Any) -> tuple[str, dict[int, dict[str, str]], list[str | None]]:
    text, calls, finishes = "", {}, []
    async for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finishes.append(choice.finish_reason)
        text += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            if delta.function and delta.function.name:
                call["name"] += delta.function.name
            if delta.function and delta.function.arguments:
                call["arguments"] += delta.function.arguments
    return text, calls, finishes


async def test_openai_client_streams_a_repaired_call(fake, proxy):
    upstream, _ = fake
    upstream.script = [
        Scripted(tool_call_completion("get_order_detail", GOOD)),
        Scripted(tool_call_completion("get_order_details", GOOD)),
    ]
    proxy_client = await proxy()
    body = chat_body()
    stream = await client_for(proxy_client).chat.completions.create(
        model="m", messages=body["messages"], tools=body["tools"], stream=True,
        stream_options={"include_usage": True},
    )
    text, calls, finishes = await collect(stream)
    assert upstream.calls == 2
    assert "stream" not in upstream.requests[1]  # repairs are non-streamed
    assert calls == {0: {"name": "get_order_details", "arguments": json.dumps(GOOD)}}
    assert finishes[-1] == "tool_calls" and text == ""


async def test_openai_client_streams_valid_calls_and_text_untouched(fake, proxy):
    upstream, _ = fake
    upstream.script = [
        Scripted(tool_call_completion("cancel_order", {"order_id": "#W1234567"})),
        Scripted(text_completion("Your order #W1234567 has shipped.")),
    ]
    proxy_client = await proxy()
    client = client_for(proxy_client)
    body = chat_body()
    first = await collect(await client.chat.completions.create(
        model="m", messages=body["messages"], tools=body["tools"], stream=True))
    assert first[1][0]["name"] == "cancel_order" and upstream.calls == 1
    second = await collect(await client.chat.completions.create(
        model="m", messages=body["messages"], tools=body["tools"], stream=True))
    assert second[0] == "Your order #W1234567 has shipped." and second[2][-1] == "stop"
    assert upstream.calls == 2


async def test_stream_without_tools_is_byte_identical(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(text_completion("plain words"))
    proxy_client = await proxy()
    body = chat_body(stream=True)
    del body["tools"]
    through = await (await proxy_client.post("/v1/chat/completions", json=body)).read()
    _, server = fake
    async with proxy_client.session.post(server.make_url("/v1/chat/completions"),
                                         json=body) as direct:
        assert through == await direct.read()


async def test_content_format_stream_is_lifted(fake, proxy):
    upstream, _ = fake
    written = '```json\n{"name": "cancel_order", "arguments": {"order_id": "#W1234567"}}\n```'
    upstream.default = Scripted(text_completion(written))
    proxy_client = await proxy(tool_call_format="content")
    body = chat_body()
    text, calls, finishes = await collect(await client_for(proxy_client).chat.completions.create(
        model="m", messages=body["messages"], tools=body["tools"], stream=True))
    assert text == "" and calls[0]["name"] == "cancel_order"
    assert finishes[-1] == "tool_calls"


async def test_stream_exhausted_with_error_policy_ends_with_an_error_event(fake, proxy):
    upstream, _ = fake
    upstream.default = Scripted(tool_call_completion("get_order_detail", GOOD))
    proxy_client = await proxy(max_repairs=1, on_exhausted="error")
    response = await proxy_client.post("/v1/chat/completions", json=chat_body(stream=True))
    text = await response.text()
    assert upstream.calls == 2
    # The error chunk, then [DONE] (issue 18): one end of stream in chat's grammar.
    assert "tool_call_repair_exhausted" in text and text.endswith("data: [DONE]\n\n")
    assert "get_order_detail" not in text  # the invalid call never reaches the agent


async def test_stream_empty_reply_is_repaired_into_a_call(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(text_completion("")),
                       Scripted(tool_call_completion("cancel_order", {"order_id": "#W1"}))]
    proxy_client = await proxy()
    body = chat_body()
    text, calls, finishes = await collect(await client_for(proxy_client).chat.completions.create(
        model="m", messages=body["messages"], tools=body["tools"], stream=True))
    assert calls[0]["name"] == "cancel_order" and finishes[-1] == "tool_calls"
    assert text == ""  # the repair prompt's answer carries no prose to the agent
    assert upstream.requests[1]["messages"][-1]["role"] == "user"
