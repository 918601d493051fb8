"""The guardrail's hooks called directly, in process: what needs no proxy process."""

from __future__ import annotations

import litellm
import pytest

from reflexguard.api import RepairExhausted
from reflexguard.integrations.litellm import ReflexGuardrail, chat_body
from tests.api.test_openai_guard import GOOD, _request
from tests.fakes.fake_upstream import tool_call_completion


def test_chat_body_keeps_the_chat_fields_and_drops_litellms_own() -> None:
    data = {**_request(), "model": "qwen", "metadata": {"user_api_key": "x"},
            "litellm_call_id": "abc", "proxy_server_request": {}}
    body = chat_body(data)
    assert set(body) == {"model", "messages", "tools"}
    assert body["messages"] is data["messages"]  # shared, never copied or changed


def test_settings_in_litellm_params_reach_the_policy() -> None:
    guardrail = ReflexGuardrail(guardrail_name="reflexguard", event_hook="post_call",
                                max_repairs=3, json_repair=True)
    assert guardrail.guard.policy.max_repairs == 3
    assert guardrail.guard.policy.fixes.json_repair is True
    assert guardrail.guardrail_name == "reflexguard"


async def test_exhausted_ladder_raises_under_on_exhausted_error() -> None:
    guardrail = ReflexGuardrail(guardrail_name="reflexguard", event_hook="post_call",
                                max_repairs=0, on_exhausted="error")
    response = litellm.ModelResponse(**tool_call_completion("get_order", GOOD))
    with pytest.raises(RepairExhausted):
        await guardrail.async_post_call_success_hook({**_request(), "model": "m"}, None,
                                                     response)


async def test_a_valid_response_is_left_to_litellm() -> None:
    guardrail = ReflexGuardrail(guardrail_name="reflexguard", event_hook="post_call")
    response = litellm.ModelResponse(**tool_call_completion("get_order_details", GOOD))
    data = {**_request(), "model": "m"}
    assert await guardrail.async_post_call_success_hook(data, None, response) is None
