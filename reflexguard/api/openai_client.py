"""`guard(client)` for the `openai` SDK: `chat.completions.create` and `responses.create`
validated and repaired, through the client and through its `with_raw_response` and
`with_streaming_response` (`reflexguard.api.raw`).

An I/O edge (the SDK does the I/O). Everything but those two `create` methods is the
wrapped client's own attribute. The caller's keyword arguments and lists are never
mutated: the body is a new dict, and re-asks build new lists. `responses.create` is
guarded as the proxy's native Responses mode guards it (`reflexguard.dialects.responses`).
"""

from __future__ import annotations

from typing import Any, cast

import openai
from openai._models import construct_type
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from reflexguard.api.drive import Door
from reflexguard.api.engine import Guard
from reflexguard.api.resources import (
    REQUEST_OPTIONS,
    AsyncGuardedCreate,
    GuardedCreate,
    body_params,
    native_door,
)
from reflexguard.dialects.responses import RESPONSES

__all__ = ["OPENAI_DOOR", "REQUEST_OPTIONS", "RESPONSES_DOOR", "GuardedClient", "body_params"]

OPENAI_DOOR = Door(
    to_dict=lambda obj: obj.model_dump(exclude_unset=True),
    completion=ChatCompletion.model_validate,
    chunk=ChatCompletionChunk.model_validate,
    failures=(openai.APIError,),
)
# The SDK's stream builds each event this way (the client's _process_response_data: construct_type).
RESPONSES_DOOR = native_door(RESPONSES, Response, (openai.APIError,), lambda data: (
    construct_type(value=data, type_=cast(Any, ResponseStreamEvent))))


class _Chat:
    def __init__(self, completions: Any) -> None:
        self.completions = completions


class _RawClient:
    """`client.with_raw_response` / `client.with_streaming_response`: the guarded
    resources' raw paths; every other resource is the SDK's own."""

    def __init__(self, guarded: GuardedClient, sdk: Any, kind: str) -> None:
        self._sdk = sdk
        self.chat = _Chat(getattr(guarded.chat.completions, kind))
        self.responses = getattr(guarded.responses, kind)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sdk, name)


class GuardedClient:
    """The wrapped client; `.guard` holds the policy and the telemetry (its metrics)."""

    def __init__(self, client: openai.OpenAI | openai.AsyncOpenAI, guard: Guard) -> None:
        self.client = client
        self.guard = guard
        kind = AsyncGuardedCreate if isinstance(client, openai.AsyncOpenAI) else GuardedCreate
        self.chat = _Chat(kind(client.chat.completions, guard, OPENAI_DOOR))
        self.responses = kind(client.responses, guard, RESPONSES_DOOR, RESPONSES)

    @property
    def with_raw_response(self) -> _RawClient:
        return _RawClient(self, self.client.with_raw_response, "with_raw_response")

    @property
    def with_streaming_response(self) -> _RawClient:
        return _RawClient(self, self.client.with_streaming_response,
                          "with_streaming_response")

    def with_options(self, **options: Any) -> GuardedClient:
        """The SDK's `with_options`, still guarded (same policy and metrics)."""
        return GuardedClient(self.client.with_options(**options), self.guard)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)
