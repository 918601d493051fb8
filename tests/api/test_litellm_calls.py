"""`reflexguard.guard_litellm` around the real `litellm.completion` / `acompletion`."""

from __future__ import annotations

import copy
import json
from typing import Any

import litellm

import reflexguard
from tests.api.test_openai_guard import GOOD, _request, _script, counted
from tests.fakes.fake_upstream import FakeUpstream, tool_call_completion


def _kwargs(url: str, **extra: Any) -> dict[str, Any]:
    return {"model": "openai/m", "api_base": url, "api_key": "k", **_request(), **extra}


def test_litellm_completion_repairs_and_returns_a_model_response(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD))
    kwargs = _kwargs(url)
    before = copy.deepcopy({k: v for k, v in kwargs.items()})
    llm = reflexguard.guard_litellm()
    reply = llm.completion(**kwargs)
    assert kwargs == before
    assert isinstance(reply, litellm.ModelResponse)
    call = reply.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_order_details", GOOD)
    assert fake.calls == 2
    assert counted(llm.guard.telemetry.metrics_text(), "repairs", 'outcome="fixed_by_reask"')


async def test_litellm_acompletion_repairs(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order_details", '{"order_id": "#W1234567"'),
            tool_call_completion("get_order_details", GOOD))
    reply = await reflexguard.guard_litellm().acompletion(**_kwargs(url))
    assert json.loads(reply.choices[0].message.tool_calls[0].function.arguments) == GOOD
    assert fake.calls == 2


async def test_litellm_astream_repairs_into_stream_chunks(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD))
    stream = await reflexguard.guard_litellm().acompletion(**_kwargs(url, stream=True))
    chunks = [chunk async for chunk in stream]
    assert all(isinstance(c, litellm.ModelResponseStream) for c in chunks)
    name = "".join(d.function.name or "" for c in chunks for ch in c.choices
                   for d in (ch.delta.tool_calls or []))
    assert name == "get_order_details"
    assert fake.calls == 2
