"""`error_budget` in-process: the Python API reads spent failures from the conversation as
the proxy does (no header there: the setting is the budget)."""

from __future__ import annotations

from typing import Any

import openai

import reflexguard
from reflexguard.core.choice import WITHHELD_TEXT
from tests.conftest import chat_body
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion

GOOD = {"order_id": "#W1234567", "detail": "full"}


def _request(spent: int) -> dict[str, Any]:
    body = chat_body()
    body.pop("model")
    for index in range(spent):
        body["messages"] += [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"e{index}", "type": "function",
                "function": {"name": "cancel_order", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"e{index}", "content": "Error: no order_id"}]
    return body


def test_one_left_withholds_the_invalid_call(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.default = Scripted(tool_call_completion("get_order_detail", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"), error_budget=3,
                               max_repairs=1)
    reply = client.chat.completions.create(model="m", **_request(2))
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content == WITHHELD_TEXT
    assert fake.calls == 2


def test_plenty_left_passes_the_invalid_call_as_configured(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.default = Scripted(tool_call_completion("get_order_detail", GOOD))
    client = reflexguard.guard(openai.OpenAI(base_url=url, api_key="k"), error_budget=10,
                               max_repairs=1)
    reply = client.chat.completions.create(model="m", **_request(2))
    assert reply.choices[0].message.tool_calls[0].function.name == "get_order_detail"
