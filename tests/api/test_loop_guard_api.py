"""The loop guard in the caller's process: `reflexguard.guard` around the real `openai` and
`anthropic` SDK clients (chat, streamed and not; Responses; Messages), against the fake
upstream in a background thread."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

import reflexguard
from tests.api.test_openai_guard import counted
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion
from tests.fakes.native_replies import anthropic_call, function_call, openai_response
from tests.http.test_loop_guard_http import OTHER, REPEATED, looping

GUARDED = {"loop_guard": "repair"}


def _script(fake: FakeUpstream, *replies: dict[str, Any]) -> None:
    fake.script.extend(Scripted(completion=r) for r in replies)


def _chat(**extra: Any) -> dict[str, Any]:
    body = looping("chat", **extra)
    body.pop("model")
    return body


def test_sync_chat_a_repeat_is_re_asked_and_the_new_call_returned(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion(*REPEATED), tool_call_completion(*OTHER))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"), **GUARDED)
    request = _chat()
    before = json.dumps(request)
    reply = client.chat.completions.create(model="m", **request)
    assert json.dumps(request) == before
    assert reply.choices[0].message.tool_calls[0].function.name == "cancel_order"
    assert fake.calls == 2 and "already called" in json.dumps(fake.requests[1])
    assert counted(client.guard.telemetry.metrics_text(), "repeated_calls",
                   'action="replaced"') == 1.0


async def test_async_chat_a_repeat_again_keeps_the_original(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion(*REPEATED), tool_call_completion(*REPEATED))
    client = reflexguard.guard(openai.AsyncOpenAI(base_url=url, api_key="k"), **GUARDED)
    reply = await client.chat.completions.create(model="m", **_chat())
    assert reply.choices[0].message.tool_calls[0].function.name == REPEATED[0]
    assert reply.usage is not None and reply.usage.prompt_tokens == 20
    metrics = client.guard.telemetry.metrics_text()
    assert counted(metrics, "repeated_calls", 'action="kept"') == 1.0
    assert counted(metrics, "fallbacks", 'kind="repeated_call_kept"') == 1.0


def test_sync_chat_stream_is_guarded_too(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion(*REPEATED), tool_call_completion(*OTHER))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"), **GUARDED)
    chunks = list(client.chat.completions.create(model="m", stream=True, **_chat()))
    names = "".join(d.function.name or "" for c in chunks for ch in c.choices
                    for d in ch.delta.tool_calls or [] if d.function)
    assert names == "cancel_order" and fake.calls == 2


def test_observe_counts_without_a_re_ask(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion(*REPEATED))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"), loop_guard="observe")
    reply = client.chat.completions.create(model="m", **_chat())
    assert reply.choices[0].message.tool_calls[0].function.name == REPEATED[0]
    assert fake.calls == 1
    assert counted(client.guard.telemetry.metrics_text(), "repeated_calls",
                   'action="observed"') == 1.0


def test_responses_a_repeat_is_re_asked_natively(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, openai_response(function_call(*REPEATED)),
            openai_response(function_call(*OTHER)))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k", max_retries=0),
                               **GUARDED)
    response = client.responses.create(**looping("responses"))
    assert [i.name for i in response.output if i.type == "function_call"] == ["cancel_order"]
    assert fake.paths[-1].endswith("/responses") and fake.calls == 2


def test_messages_a_repeat_is_re_asked_natively(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, anthropic_call(*REPEATED), anthropic_call(*OTHER))
    client = reflexguard.guard(anthropic.Anthropic(base_url=url.removesuffix("/v1"),
                                                   api_key="k", max_retries=0), **GUARDED)
    message = client.messages.create(**looping("messages"))
    assert [b.name for b in message.content if b.type == "tool_use"] == ["cancel_order"]
    assert fake.paths[-1].endswith("/messages") and fake.calls == 2


def test_stop_ends_the_loop_with_a_labelled_text_sync_and_streamed(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, *(tool_call_completion(*REPEATED) for _ in range(4)))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"), loop_guard="stop")
    reply = client.chat.completions.create(model="m", **_chat())
    message = reply.choices[0].message
    assert not message.tool_calls and reply.choices[0].finish_reason == "stop"
    assert (message.content or "").startswith("[reflexguard stopped a repeated tool call]")
    chunks = list(client.chat.completions.create(model="m", stream=True, **_chat()))
    text = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    assert text.startswith("[reflexguard stopped") and fake.calls == 4
    assert counted(client.guard.telemetry.metrics_text(), "repeated_calls",
                   'action="stopped"') == 2.0
