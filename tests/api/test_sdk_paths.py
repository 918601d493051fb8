"""Every way a framework calls the SDK is guarded (issue 19): the SDKs' "not given"
sentinels, `with_raw_response` and `with_streaming_response` on the resource and on the
client, for chat, Responses and Messages; what stays unguarded is a counted WARNING."""

from __future__ import annotations

import json
import logging
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

import reflexguard
from tests.api.test_openai_guard import counted
from tests.conftest import chat_body
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion
from tests.fakes.native_replies import (
    anthropic_call,
    function_call,
    openai_response,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

BAD_NAME, NAME = "get_order_detail", "get_order_details"


def _chat(fake: FakeUpstream) -> dict[str, Any]:
    fake.script.extend([Scripted(tool_call_completion(BAD_NAME, GOOD)),
                        Scripted(tool_call_completion(NAME, GOOD, call_id="call_2"))])
    return chat_body()


def _responses(fake: FakeUpstream) -> dict[str, Any]:
    fake.script.extend([Scripted(openai_response(function_call(BAD_NAME, GOOD))),
                        Scripted(openai_response(function_call(NAME, GOOD, call_id="c2")))])
    return responses_body()


def _messages(fake: FakeUpstream) -> dict[str, Any]:
    fake.script.extend([Scripted(anthropic_call(BAD_NAME, GOOD)),
                        Scripted(anthropic_call(NAME, GOOD, call_id="toolu_2"))])
    return messages_body()


def _openai(url: str) -> Any:
    return reflexguard.guard(openai.OpenAI(base_url=url, api_key="k", max_retries=0))


def _async_openai(url: str) -> Any:
    return reflexguard.guard(openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0))


def _anthropic(url: str) -> Any:
    return reflexguard.guard(anthropic.Anthropic(base_url=url.removesuffix("/v1"),
                                                 api_key="k", max_retries=0))


def _name(answer: Any) -> str:
    if isinstance(answer, ChatCompletion):
        return answer.choices[0].message.tool_calls[0].function.name  # type: ignore[index,union-attr]
    if isinstance(answer, Response):
        return next(i.name for i in answer.output if i.type == "function_call")
    assert isinstance(answer, Message)
    return next(b.name for b in answer.content if b.type == "tool_use")


def _unguarded(client: Any, kind: str) -> float:
    return counted(client.guard.telemetry.metrics_text(), "fallbacks", kind)


# -- the SDKs' "not given" sentinels ------------------------------------------------------


@pytest.mark.parametrize("sentinel", [openai.omit, openai.NOT_GIVEN], ids=["omit", "NOT_GIVEN"])
def test_openai_sentinels_read_as_not_given(upstream: tuple[FakeUpstream, str],
                                            sentinel: Any) -> None:
    """The Agents SDK passes `stream=omit`: it used to fall back unguarded."""
    fake, url = upstream
    client = _openai(url)
    chat = client.chat.completions.create(**_chat(fake), stream=sentinel, top_p=sentinel)
    responses = client.responses.create(**_responses(fake), stream=sentinel,
                                        include=sentinel)
    assert _name(chat) == NAME and _name(responses) == NAME
    assert fake.calls == 4
    assert all("top_p" not in r and "stream" not in r and "include" not in r
               for r in fake.requests)
    assert _unguarded(client, "request_not_guarded") == 0


@pytest.mark.parametrize("sentinel", [anthropic.omit, anthropic.NOT_GIVEN],
                         ids=["omit", "NOT_GIVEN"])
def test_anthropic_sentinels_read_as_not_given(upstream: tuple[FakeUpstream, str],
                                               sentinel: Any) -> None:
    fake, url = upstream
    client = _anthropic(url)
    message = client.messages.create(**_messages(fake), stream=sentinel, top_k=sentinel)
    assert _name(message) == NAME and fake.calls == 2
    assert _unguarded(client, "request_not_guarded") == 0


# -- with_raw_response --------------------------------------------------------------------


@pytest.mark.parametrize("where", ["resource", "client"])
def test_raw_response_parses_to_the_guarded_answer_with_the_sdks_headers(
        upstream: tuple[FakeUpstream, str], where: str) -> None:
    """langchain-openai: `client.with_raw_response.create(...)`, then `.headers` and
    `.parse()`; it used to pass straight to the SDK, unguarded and uncounted."""
    fake, url = upstream
    client = _openai(url)
    create = (client.chat.completions.with_raw_response.create if where == "resource"
              else client.with_raw_response.chat.completions.create)
    raw = create(**_chat(fake))
    assert _name(raw.parse()) == NAME and fake.calls == 2
    # The SDK's own response object underneath: its status, headers and request.
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.http_request.url.path == "/v1/chat/completions"
    assert isinstance(raw.parse(), ChatCompletion)


async def test_async_raw_responses_and_messages_are_guarded(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    client = _async_openai(url)
    raw = await client.with_raw_response.responses.create(**_responses(fake))
    assert _name(raw.parse()) == NAME and raw.status_code == 200
    claude = _anthropic(url)
    raw = claude.messages.with_raw_response.create(**_messages(fake))
    assert _name(raw.parse()) == NAME and raw.headers["content-type"]
    raw = claude.with_raw_response.messages.create(**_messages(fake))
    assert _name(raw.parse()) == NAME
    assert fake.calls == 6


def test_a_clean_raw_response_is_the_sdks_own_object(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.script.append(Scripted(tool_call_completion(NAME, GOOD)))
    raw = _openai(url).chat.completions.with_raw_response.create(**chat_body())
    assert type(raw).__name__ == "LegacyAPIResponse" and fake.calls == 1


def test_the_raw_body_under_a_repaired_answer_is_a_counted_warning(
        upstream: tuple[FakeUpstream, str], caplog: pytest.LogCaptureFixture) -> None:
    fake, url = upstream
    client = _openai(url)
    raw = client.chat.completions.with_raw_response.create(**_chat(fake))
    with caplog.at_level(logging.WARNING, logger="reflexguard"):
        body = json.loads(raw.text)  # the upstream's first answer, as it came
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == BAD_NAME
    assert _unguarded(client, "raw_response_not_guarded") == 1
    assert any("raw_response_not_guarded" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


# -- with_streaming_response --------------------------------------------------------------


def test_streaming_response_parses_to_the_guarded_answer(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    client = _openai(url)
    with client.chat.completions.with_streaming_response.create(**_chat(fake)) as response:
        assert response.status_code == 200
        assert _name(response.parse()) == NAME
    with client.with_streaming_response.responses.create(**_responses(fake)) as response:
        assert _name(response.parse()) == NAME
    assert fake.calls == 4


async def test_async_streaming_response_of_a_chat_stream_is_guarded(
        upstream: tuple[FakeUpstream, str]) -> None:
    """The Agents SDK streams through `with_streaming_response.create(stream=True)`."""
    fake, url = upstream
    client = _async_openai(url)
    body = _chat(fake)
    async with client.chat.completions.with_streaming_response.create(
            **body, stream=True) as response:
        names = [call.function.name async for chunk in await response.parse()
                 for choice in chunk.choices for call in choice.delta.tool_calls or ()
                 if call.function and call.function.name]
    assert names == [NAME] and fake.calls == 2


# -- what stays unguarded says so, at WARNING ---------------------------------------------


def test_unguarded_paths_are_counted_warnings(upstream: tuple[FakeUpstream, str],
                                              caplog: pytest.LogCaptureFixture) -> None:
    _, url = upstream
    client = _openai(url)
    broken_schema = [{"type": "function", "function": {"name": "f",
                                                       "parameters": {"type": "objekt"}}}]
    with caplog.at_level(logging.WARNING, logger="reflexguard"):
        _ = client.chat.completions.parse  # the structured-output helper: not guarded
        _ = list(client.chat.completions.create(**chat_body(), stream=True, n=2))  # n > 1
        client.chat.completions.create(**chat_body(tools=broken_schema))  # the proxy's 400
    assert _unguarded(client, "call_not_guarded") == 1
    assert _unguarded(client, "multiple_choices_stream_not_guarded") == 1
    assert _unguarded(client, "request_not_guarded") == 1
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for kind in ("call_not_guarded", "multiple_choices_stream_not_guarded",
                 "request_not_guarded"):
        assert any(kind in line for line in warned), (kind, warned)
