"""`guard(client)` for the `openai` SDK: `chat.completions.create` validated and repaired.

An I/O edge (the SDK does the I/O). Everything but `chat.completions.create` is the
wrapped client's own attribute. The caller's keyword arguments and message list are
never mutated: the body is a new dict, and re-asks build new lists.
"""

from __future__ import annotations

import inspect
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from reflexguard.api.drive import Door, complete_async, complete_sync
from reflexguard.api.engine import Guard
from reflexguard.core.model import JsonObject

# Keyword arguments that steer the SDK's request rather than being part of the body.
REQUEST_OPTIONS = ("extra_headers", "extra_query", "timeout")

OPENAI_DOOR = Door(
    to_dict=lambda obj: obj.model_dump(exclude_unset=True),
    completion=ChatCompletion.model_validate,
    chunk=ChatCompletionChunk.model_validate,
    failures=(openai.APIError,),
)


def body_params(create: Any) -> frozenset[str]:
    return frozenset(inspect.signature(create).parameters) - {"extra_body", *REQUEST_OPTIONS}


def _split(kwargs: dict[str, Any]) -> tuple[JsonObject, dict[str, Any]]:
    """(the request body, the SDK's request options) from `create`'s keyword arguments."""
    options = {k: kwargs[k] for k in REQUEST_OPTIONS if k in kwargs}
    body = {k: v for k, v in kwargs.items() if k not in REQUEST_OPTIONS and k != "extra_body"}
    extra = kwargs.get("extra_body")
    if isinstance(extra, dict):
        body.update(extra)
    return body, options


def _caller(create: Any, params: frozenset[str], options: dict[str, Any]) -> Any:
    """`create` made to take a plain body: fields it has no parameter for go in extra_body."""
    def call(body: JsonObject) -> Any:
        known = {k: v for k, v in body.items() if k in params}
        extra = {k: v for k, v in body.items() if k not in params}
        return create(**known, **options, **({"extra_body": extra} if extra else {}))
    return call


class _Completions:
    def __init__(self, client: Any, guard: Guard) -> None:
        self._create = client.chat.completions.create
        self._params = body_params(self._create)
        self._guard = guard

    def create(self, **kwargs: Any) -> Any:
        body, options = _split(kwargs)
        call = _caller(self._create, self._params, options)
        return complete_sync(self._guard, body, call, OPENAI_DOOR)


class _AsyncCompletions(_Completions):
    async def create(self, **kwargs: Any) -> Any:
        body, options = _split(kwargs)
        call = _caller(self._create, self._params, options)
        return await complete_async(self._guard, body, call, OPENAI_DOOR)


class _Chat:
    def __init__(self, completions: _Completions) -> None:
        self.completions = completions


class GuardedClient:
    """The wrapped client; `.guard` holds the policy and the telemetry (its metrics)."""

    def __init__(self, client: openai.OpenAI | openai.AsyncOpenAI, guard: Guard) -> None:
        self.client = client
        self.guard = guard
        kind = _AsyncCompletions if isinstance(client, openai.AsyncOpenAI) else _Completions
        self.chat = _Chat(kind(client, guard))

    def with_options(self, **options: Any) -> GuardedClient:
        """The SDK's `with_options`, still guarded (same policy and metrics)."""
        return GuardedClient(self.client.with_options(**options), self.guard)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)
