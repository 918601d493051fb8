"""`reflexguard.guard` around the real `openai` SDK clients, against the fake upstream."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

import reflexguard
from reflexguard.api import RepairExhausted
from tests.conftest import chat_body
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion

GOOD = {"order_id": "#W1234567", "detail": "full"}


def counted(metrics: bytes, name: str, label: str) -> float:
    """A counter's value whatever other labels it carries (0 when absent)."""
    pattern = rf'^reflexguard_{name}_total{{[^}}]*{re.escape(label)}[^}}]*}} (\S+)$'
    found = re.search(pattern, metrics.decode(), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _script(fake: FakeUpstream, *answers: dict[str, Any]) -> None:
    fake.script.extend(Scripted(completion=a) for a in answers)


def _request(**extra: Any) -> dict[str, Any]:
    body = chat_body(**extra)
    body.pop("model")
    return body


def test_valid_call_returns_the_sdks_own_completion_untouched(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order_details", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    reply = client.chat.completions.create(model="m", **_request())
    assert isinstance(reply, ChatCompletion)
    assert reply.choices[0].message.tool_calls[0].function.name == "get_order_details"
    assert fake.calls == 1


def test_sync_client_repairs_an_unknown_tool_without_touching_the_callers_messages(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD, content="fixed"))
    request = _request()
    before = copy.deepcopy(request)
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    reply = client.chat.completions.create(model="m", **request)
    assert request == before
    assert isinstance(reply, ChatCompletion)
    call = reply.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_order_details", GOOD)
    assert reply.choices[0].message.content is None  # the repair's prose never reaches us
    assert reply.usage is not None and reply.usage.total_tokens == 40
    assert fake.calls == 2
    assert fake.requests[1]["messages"][-1]["role"] == "tool"
    assert counted(client.guard.telemetry.metrics_text(), "repairs", 'outcome="fixed_by_reask"')


async def test_async_client_repairs_invalid_arguments(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order_details", '{"order_id": 7}'),
            tool_call_completion("get_order_details", GOOD))
    client = reflexguard.guard(openai.AsyncOpenAI(base_url=url, api_key="k"))
    reply = await client.chat.completions.create(model="m", **_request())
    assert isinstance(reply, ChatCompletion)
    assert json.loads(reply.choices[0].message.tool_calls[0].function.arguments) == GOOD
    assert fake.calls == 2


async def test_sync_client_inside_a_running_loop_repairs_on_a_worker_thread(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    reply = client.chat.completions.create(model="m", **_request())
    assert reply.choices[0].message.tool_calls[0].function.name == "get_order_details"


def _streamed_call(chunks: list[ChatCompletionChunk]) -> tuple[str, str]:
    name, args = "", ""
    for chunk in chunks:
        assert isinstance(chunk, ChatCompletionChunk)
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                name += delta.function.name or "" if delta.function else ""
                args += delta.function.arguments or "" if delta.function else ""
    return name, args


def test_sync_stream_is_repaired_and_written_as_sdk_chunks(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    chunks = list(client.chat.completions.create(
        model="m", stream=True, stream_options={"include_usage": True}, **_request()))
    name, args = _streamed_call(chunks)
    assert (name, json.loads(args)) == ("get_order_details", GOOD)
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 40
    assert fake.calls == 2 and "stream" not in fake.requests[1]


async def test_async_stream_passes_text_and_repairs_the_call(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD, content="Looking it up."),
            tool_call_completion("get_order_details", GOOD))
    client = reflexguard.guard(openai.AsyncOpenAI(base_url=url, api_key="k"))
    stream = await client.chat.completions.create(model="m", stream=True, **_request())
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Looking it up."
    name, args = _streamed_call(chunks)
    assert (name, json.loads(args)) == ("get_order_details", GOOD)


def test_exhausted_ladder_raises_when_on_exhausted_is_error(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.default = Scripted(completion=tool_call_completion("get_order", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"), max_repairs=1,
                               on_exhausted="error")
    with pytest.raises(RepairExhausted, match="unknown_tool"):
        client.chat.completions.create(model="m", **_request())
    assert fake.calls == 2


def test_observe_mode_returns_the_invalid_call_and_counts_it(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"), repair=False)
    reply = client.chat.completions.create(model="m", **_request())
    assert reply.choices[0].message.tool_calls[0].function.name == "get_order"
    assert counted(client.guard.telemetry.metrics_text(), "tool_calls", 'channel="unknown_tool"')


def test_extra_body_fields_reach_the_upstream_on_every_attempt(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    client.chat.completions.create(model="m", extra_body={"top_k": 5}, **_request())
    assert [r.get("top_k") for r in fake.requests] == [5, 5]


def test_importing_reflexguard_imports_no_client_library() -> None:
    import subprocess
    import sys
    code = ("import sys, reflexguard; "
            "print(sorted(m for m in ('openai', 'litellm', 'reflexguard.api')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_events_go_to_the_stdlib_reflexguard_logger(
        upstream: tuple[FakeUpstream, str], caplog: pytest.LogCaptureFixture) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    with caplog.at_level("INFO", logger="reflexguard"):
        client.chat.completions.create(model="m", **_request())
    events = [json.loads(r.getMessage())["event"] for r in caplog.records
              if r.name == "reflexguard"]
    assert events == ["attempt", "attempt", "outcome"]


def test_a_request_reflexguard_cannot_read_goes_unguarded_and_is_counted(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    bad_tool = {"type": "function", "function": {"name": "x", "parameters": {"type": 7}}}
    reply = client.chat.completions.create(model="m", **_request(tools=[bad_tool]))
    assert reply.choices[0].message.tool_calls[0].function.name == "get_order"
    assert counted(client.guard.telemetry.metrics_text(), "fallbacks",
                   'kind="request_not_guarded"')


def test_a_guarded_stream_closes_like_the_sdks(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order_details", GOOD, content="Checking."))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    with client.chat.completions.create(model="m", stream=True, **_request()) as stream:
        first = next(stream)
    assert isinstance(first, ChatCompletionChunk)
    assert fake.calls == 1


async def test_an_async_guarded_stream_closes_like_the_sdks(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order_details", GOOD, content="Checking."))
    client = reflexguard.guard(openai.AsyncOpenAI(base_url=url, api_key="k"))
    async with await client.chat.completions.create(model="m", stream=True,
                                                    **_request()) as stream:
        first = await stream.__anext__()
    assert isinstance(first, ChatCompletionChunk)


def test_with_options_stays_guarded(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"))
    reply = client.with_options(timeout=30).chat.completions.create(model="m", **_request())
    assert reply.choices[0].message.tool_calls[0].function.name == "get_order_details"
