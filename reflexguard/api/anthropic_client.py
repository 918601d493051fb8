"""`guard(client)` for the `anthropic` SDK: `messages.create` validated and repaired.

An I/O edge (the SDK does the I/O). Guarded as the proxy's native Messages mode guards
it (`reflexguard.dialects.messages`): the SDK's reply read into the core's view, re-asks
written as Messages requests (tool_result blocks with is_error), the answer the SDK's own
`Message`. Everything but `messages.create` is the wrapped client's own attribute.
"""

from __future__ import annotations

from typing import Any, cast

import anthropic
from anthropic._models import construct_type
from anthropic.types import Message, RawMessageStreamEvent

from reflexguard.api.engine import Guard
from reflexguard.api.resources import AsyncGuardedCreate, GuardedCreate, native_door
from reflexguard.dialects.messages import MESSAGES

# The SDK's stream builds each event this way (the client's _process_response_data: construct_type).
MESSAGES_DOOR = native_door(MESSAGES, Message, (anthropic.APIError,), lambda data: (
    construct_type(value=data, type_=cast(Any, RawMessageStreamEvent))))


class _RawClient:
    """`client.with_raw_response` / `with_streaming_response`: `messages` guarded."""

    def __init__(self, messages: Any, sdk: Any) -> None:
        self._sdk = sdk
        self.messages = messages

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sdk, name)


class GuardedAnthropic:
    """The wrapped client; `.guard` holds the policy and the telemetry (its metrics)."""

    def __init__(self, client: anthropic.Anthropic | anthropic.AsyncAnthropic,
                 guard: Guard) -> None:
        self.client = client
        self.guard = guard
        kind = (AsyncGuardedCreate if isinstance(client, anthropic.AsyncAnthropic)
                else GuardedCreate)
        self.messages = kind(client.messages, guard, MESSAGES_DOOR, MESSAGES)

    @property
    def with_raw_response(self) -> _RawClient:
        return _RawClient(self.messages.with_raw_response, self.client.with_raw_response)

    @property
    def with_streaming_response(self) -> _RawClient:
        return _RawClient(self.messages.with_streaming_response,
                          self.client.with_streaming_response)

    def with_options(self, **options: Any) -> GuardedAnthropic:
        """The SDK's `with_options`, still guarded (same policy and metrics)."""
        return GuardedAnthropic(self.client.with_options(**options), self.guard)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)
