"""`GuardedLiteLLM`: `litellm.completion` and `litellm.acompletion`, validated and repaired.

An I/O edge (litellm does the I/O). A wrapper, not a monkey-patch: `litellm` itself is
left as it is. The keyword arguments are the body (litellm's own options such as
`api_base` ride along on every re-ask); the caller's dict and messages are never mutated.
"""

from __future__ import annotations

from typing import Any

import litellm
import openai

from reflexguard.api.drive import Door, complete_async, complete_sync
from reflexguard.api.engine import Guard
from reflexguard.core.model import JsonObject


def _plain(obj: Any) -> JsonObject:
    dumped: JsonObject = obj.model_dump()
    return dumped


LITELLM_DOOR = Door(
    to_dict=_plain,
    completion=lambda body: litellm.ModelResponse(**body),
    chunk=lambda body: litellm.ModelResponseStream(**body),
    failures=(openai.APIError,),  # litellm's exceptions are the SDK's subclasses
)


class GuardedLiteLLM:
    """`completion` and `acompletion` with litellm's signature; `.guard` holds the metrics."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard

    def completion(self, **kwargs: Any) -> Any:
        return complete_sync(self.guard, dict(kwargs), _sync_call, LITELLM_DOOR)

    async def acompletion(self, **kwargs: Any) -> Any:
        return await complete_async(self.guard, dict(kwargs), _async_call, LITELLM_DOOR)


def _sync_call(body: JsonObject) -> Any:
    return litellm.completion(**body)


async def _async_call(body: JsonObject) -> Any:
    return await litellm.acompletion(**body)
