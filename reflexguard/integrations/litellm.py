"""A LiteLLM proxy guardrail that validates tool calls and re-asks through LiteLLM's router.

An I/O edge: LiteLLM does the I/O. In the proxy's `config.yaml`:

    guardrails:
      - guardrail_name: reflexguard
        litellm_params:
          guardrail: reflexguard.integrations.litellm.ReflexGuardrail
          mode: post_call
          default_on: true

Re-asks go through the proxy's own router (`llm_router.acompletion`), so LiteLLM's keys,
routing, budgets and logging apply to them; each carries the tag `reflexguard-repair`.
Settings are `REFLEXGUARD_*` variables, or any `Settings` field given in litellm_params.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

import litellm
from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.types.utils import GuardrailStatus
from openai.resources.chat.completions import AsyncCompletions

from reflexguard.api import settings_guard
from reflexguard.api.drive import settle_async, stream_async
from reflexguard.api.engine import GuardedRequest
from reflexguard.api.litellm_calls import LITELLM_DOOR
from reflexguard.api.openai_client import body_params
from reflexguard.core.attempts import LadderResult
from reflexguard.core.model import JsonObject
from reflexguard.ops.config import Settings

# The request's OpenAI fields; everything else in the proxy's `data` is LiteLLM's own.
# `metadata` is LiteLLM's own bucket in the proxy (keys, teams, tags), not a chat field there.
CHAT_FIELDS = body_params(AsyncCompletions.create) - {"self", "metadata"}
REPAIR_TAG = "reflexguard-repair"


def chat_body(data: dict[str, Any]) -> JsonObject:
    """The client's chat request out of the proxy's request data (a new dict)."""
    return {k: v for k, v in data.items() if k in CHAT_FIELDS}


class ReflexGuardrail(CustomGuardrail):
    """post_call: validate each response's tool calls; re-ask the model when one is invalid."""

    def __init__(self, **kwargs: Any) -> None:
        policy = {k: kwargs.pop(k) for k in list(kwargs) if k in Settings.model_fields}
        config = kwargs.pop("reflexguard_config", None)
        super().__init__(**kwargs)
        self.guard = settings_guard(config, **policy)

    def _request(self, data: dict[str, Any]) -> GuardedRequest | None:
        return self.guard.request(chat_body(data))

    def _send(self, request: GuardedRequest) -> Any:
        async def call(body: JsonObject) -> Any:
            from litellm.proxy.proxy_server import llm_router  # set once the proxy is up

            if llm_router is None:
                return await litellm.acompletion(**body, metadata=_metadata(request))
            return await llm_router.acompletion(**body, metadata=_metadata(request))
        return call

    async def async_post_call_success_hook(self, data: dict[str, Any], user_api_key_dict: Any,
                                           response: Any) -> Any:
        if not isinstance(response, litellm.ModelResponse):
            return None
        request = self._request(data)
        if request is None:
            return None
        began = time.time()
        first = request.first(LITELLM_DOOR.to_dict(response), 0.0)
        result = await settle_async(request, first, self._send(request), LITELLM_DOOR)
        self._log(data, result, began)
        answer = request.answer(result)
        return None if answer is None else LITELLM_DOOR.completion(answer)

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any],
    ) -> AsyncGenerator[Any, None]:
        request = self._request(request_data)
        if request is None or request.multiple_choices:
            if request is not None:
                self.guard.telemetry.fallback("multiple_choices_stream_not_guarded",
                                              request_id=request.request_id)
            async for chunk in response:
                yield chunk
            return
        async for chunk in stream_async(request, response, self._send(request), LITELLM_DOOR):
            yield chunk

    def _log(self, data: dict[str, Any], result: LadderResult, began: float) -> None:
        """One guardrail record in LiteLLM's own logging (Langfuse, DataDog, spend logs)."""
        loop = result.loop
        replaced = loop is not None and loop.changed
        status: GuardrailStatus = "success" if result.outcome == "clean" and not replaced \
            else ("guardrail_intervened" if result.final.valid else "guardrail_flagged")
        response: dict[str, Any] = {"outcome": result.outcome,
                                    "attempts": result.upstream_calls,
                                    "violations": result.violations,
                                    "fallbacks": list(result.fallbacks)}
        if loop is not None:  # the loop guard's reading (core/loop_guard.py)
            response["repeated_calls"] = {"action": loop.action, "reason": loop.reason,
                                          "calls": [r.name for _, r in loop.repeats]}
        self.add_standard_logging_guardrail_information_to_request_data(
            guardrail_json_response=response,
            request_data=data, guardrail_status=status, start_time=began, end_time=time.time(),
            guardrail_provider="reflexguard",
        )


def _metadata(request: GuardedRequest) -> dict[str, Any]:
    return {"tags": [REPAIR_TAG], "reflexguard_request_id": request.request_id}
