"""The loop guard in the LiteLLM guardrail's post-call hook, called in process with the
re-ask's route replaced by a scripted one (the hook's own logic, LiteLLM's response types
and its guardrail logging; the real-proxy path is test_litellm_guardrail.py's)."""

from __future__ import annotations

from typing import Any

import litellm
import pytest

from reflexguard.api.engine import GuardedRequest
from reflexguard.integrations.litellm import ReflexGuardrail
from tests.fakes.fake_upstream import tool_call_completion
from tests.http.test_loop_guard_http import OTHER, REPEATED, looping


def guardrail(monkeypatch: pytest.MonkeyPatch, *answers: dict[str, Any],
              **settings: Any) -> tuple[ReflexGuardrail, list[dict[str, Any]]]:
    hook = ReflexGuardrail(guardrail_name="reflexguard", event_hook="post_call", **settings)
    sent: list[dict[str, Any]] = []
    queue = list(answers)

    def send(self: ReflexGuardrail, request: GuardedRequest) -> Any:
        async def call(body: dict[str, Any]) -> Any:
            sent.append(body)
            return litellm.ModelResponse(**queue.pop(0))
        return call

    monkeypatch.setattr(ReflexGuardrail, "_send", send)
    return hook, sent


def logged(data: dict[str, Any]) -> dict[str, Any]:
    information = data["metadata"]["standard_logging_guardrail_information"]
    entry = information[-1] if isinstance(information, list) else information
    assert isinstance(entry, dict)
    return entry


async def test_a_repeat_is_re_asked_through_the_router_and_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hook, sent = guardrail(monkeypatch, tool_call_completion(*OTHER), loop_guard="repair")
    data: dict[str, Any] = {**looping("chat"), "metadata": {}}
    response = litellm.ModelResponse(**tool_call_completion(*REPEATED))
    replaced = await hook.async_post_call_success_hook(data, None, response)
    assert replaced is not None
    assert replaced.choices[0].message.tool_calls[0].function.name == "cancel_order"
    assert len(sent) == 1 and "already called" in str(sent[0]["messages"][-1])
    entry = logged(data)
    assert entry["guardrail_status"] == "guardrail_intervened"
    assert entry["guardrail_response"]["repeated_calls"]["action"] == "replaced"


async def test_a_repeat_again_leaves_the_response_to_litellm_but_bills_the_re_ask(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hook, sent = guardrail(monkeypatch, tool_call_completion(*REPEATED), loop_guard="repair")
    data: dict[str, Any] = {**looping("chat"), "metadata": {}}
    response = litellm.ModelResponse(**tool_call_completion(*REPEATED))
    kept = await hook.async_post_call_success_hook(data, None, response)
    assert kept is not None  # rebuilt: the usage includes the re-ask
    assert kept.choices[0].message.tool_calls[0].function.name == REPEATED[0]
    assert kept.usage.prompt_tokens == 20 and len(sent) == 1
    assert logged(data)["guardrail_response"]["repeated_calls"]["reason"] == "repeated_again"


async def test_with_the_loop_guard_off_a_repeat_is_left_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hook, sent = guardrail(monkeypatch, loop_guard="off")
    response = litellm.ModelResponse(**tool_call_completion(*REPEATED))
    assert await hook.async_post_call_success_hook(
        {**looping("chat"), "metadata": {}}, None, response) is None
    assert sent == []


async def test_stop_replaces_a_repeat_again_with_a_labelled_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hook, _ = guardrail(monkeypatch, tool_call_completion(*REPEATED), loop_guard="stop")
    data: dict[str, Any] = {**looping("chat"), "metadata": {}}
    response = litellm.ModelResponse(**tool_call_completion(*REPEATED))
    stopped = await hook.async_post_call_success_hook(data, None, response)
    assert stopped is not None and not stopped.choices[0].message.tool_calls
    assert stopped.choices[0].message.content.startswith("[reflexguard stopped")
    entry = logged(data)
    assert entry["guardrail_status"] == "guardrail_intervened"
    assert entry["guardrail_response"]["repeated_calls"]["action"] == "stopped"
