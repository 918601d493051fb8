"""An SDK resource whose `create` is guarded, whichever SDK and wire format it speaks.

An I/O edge (the SDK does the I/O). `create`, `with_raw_response.create` and
`with_streaming_response.create` are guarded (`reflexguard.api.raw`); every other
attribute is the wrapped resource's own, and the model calls the guard does not cover
(`parse`, `stream`) are counted and logged at WARNING when reached for. The caller's
keyword arguments and lists are never mutated: the body is a new dict, and re-asks build
new lists. The SDKs' "not given" sentinels (`omit`, `NOT_GIVEN`) are read as absent, as
the SDKs themselves read them: frameworks pass `stream=omit` for a plain call.
"""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any

from reflexguard.api.drive import Door, complete_async, complete_sync
from reflexguard.api.engine import Guard
from reflexguard.api.native_streams import native_stream_async, native_stream_sync
from reflexguard.api.raw import (
    AsyncFirstRaw,
    AsyncGuardedStreamingContext,
    FirstRaw,
    GuardedStreamingContext,
)
from reflexguard.core.model import JsonObject
from reflexguard.dialects.native import Dialect

# Keyword arguments that steer the SDK's request rather than being part of the body.
REQUEST_OPTIONS = ("extra_headers", "extra_query", "timeout")
# Model calls on a resource that the guard does not cover: reaching for one is a counted
# WARNING (the call goes out unguarded, as it would without reflexguard).
UNGUARDED_CALLS = frozenset({"parse", "stream"})


def not_given(value: object) -> bool:
    """An SDK's "not given" sentinel (openai's and anthropic's `NotGiven` / `Omit`), known
    by its type rather than imported, so that neither SDK is needed for the other."""
    kind = type(value)
    return kind.__name__ in ("NotGiven", "Omit") and \
        kind.__module__.split(".")[0] in ("openai", "anthropic")


def body_params(create: Any) -> frozenset[str]:
    return frozenset(inspect.signature(create).parameters) - {"extra_body", *REQUEST_OPTIONS}


def split_options(kwargs: dict[str, Any]) -> tuple[JsonObject, dict[str, Any]]:
    """(the request body, the SDK's request options) from `create`'s keyword arguments."""
    options = {k: kwargs[k] for k in REQUEST_OPTIONS if k in kwargs and not not_given(kwargs[k])}
    body = {k: v for k, v in kwargs.items()
            if k not in REQUEST_OPTIONS and k != "extra_body" and not not_given(v)}
    extra = kwargs.get("extra_body")
    if isinstance(extra, dict):
        body.update(extra)
    return body, options


def body_caller(create: Any, params: frozenset[str], options: dict[str, Any]) -> Any:
    """`create` made to take a plain body: fields it has no parameter for go in extra_body."""
    def call(body: JsonObject) -> Any:
        known = {k: v for k, v in body.items() if k in params}
        extra = {k: v for k, v in body.items() if k not in params}
        return create(**known, **options, **({"extra_body": extra} if extra else {}))
    return call


def native_door(dialect: Dialect, reply_type: Any,
                failures: tuple[type[BaseException], ...], event: Any = None) -> Door:
    """The door of a native dialect's SDK: its reply object read as the dialect's JSON and
    then into the core's view (`completion_of`, as the proxy's native mode reads it); a
    native reply written back as the SDK's type, built as the SDK builds its own. With
    `event` (an event's JSON -> the SDK's stream event), its streams are guarded too."""
    def to_dict(reply: Any) -> JsonObject:
        native: JsonObject = reply.model_dump(mode="json", exclude_unset=True, warnings=False)
        return dialect.completion_of(native)

    def written(body: JsonObject) -> Any:
        return reply_type.construct(**body)

    if event is None:
        return Door(to_dict=to_dict, completion=written, chunk=written, failures=failures)
    return Door(to_dict=to_dict, completion=written, chunk=written, failures=failures,
                native_sync=partial(native_stream_sync, event=event),
                native_async=partial(native_stream_async, event=event))


class GuardedCreate:
    """`resource.create` validated and repaired; the resource's other attributes as they are."""

    def __init__(self, resource: Any, guard: Guard, door: Door,
                 dialect: Dialect | None = None) -> None:
        self._resource = resource
        self._create = resource.create
        self._params = body_params(self._create)
        self._guard = guard
        self._door = door
        self._dialect = dialect

    def create(self, **kwargs: Any) -> Any:
        body, options = split_options(kwargs)
        call = body_caller(self._create, self._params, options)
        return complete_sync(self._guard, body, call, self._door, self._dialect)

    def raw_create(self, **kwargs: Any) -> Any:
        """`with_raw_response.create`: the SDK's raw response, its body the guarded answer."""
        body, options = split_options(kwargs)
        call = body_caller(self._create, self._params, options)
        first = FirstRaw(body_caller(self._resource.with_raw_response.create, self._params,
                                     options))
        out = complete_sync(self._guard, body, call, self._door, self._dialect, first)
        return first.answer(self._guard, out)

    def streaming_create(self, **kwargs: Any) -> Any:
        """`with_streaming_response.create`: the SDK's context manager, guarded on entry."""
        body, options = split_options(kwargs)
        call = body_caller(self._create, self._params, options)
        manager = body_caller(self._resource.with_streaming_response.create, self._params,
                              options)(body)

        def guarded(parsed: Any) -> Any:
            # The request went out on entry; the guard reads its parsed answer.
            return complete_sync(self._guard, body, call, self._door, self._dialect,
                                 lambda _body: parsed)
        return GuardedStreamingContext(manager, guarded, self._guard)

    @property
    def with_raw_response(self) -> RawResource:
        return RawResource(self, self._resource.with_raw_response, self.raw_create)

    @property
    def with_streaming_response(self) -> RawResource:
        return RawResource(self, self._resource.with_streaming_response,
                           self.streaming_create)

    def __getattr__(self, name: str) -> Any:
        return unguarded_attribute(self._guard, self._resource, name)


class AsyncGuardedCreate(GuardedCreate):
    async def create(self, **kwargs: Any) -> Any:
        body, options = split_options(kwargs)
        call = body_caller(self._create, self._params, options)
        return await complete_async(self._guard, body, call, self._door, self._dialect)

    async def raw_create(self, **kwargs: Any) -> Any:
        body, options = split_options(kwargs)
        call = body_caller(self._create, self._params, options)
        first = AsyncFirstRaw(body_caller(self._resource.with_raw_response.create,
                                          self._params, options))
        out = await complete_async(self._guard, body, call, self._door, self._dialect, first)
        return first.answer(self._guard, out)

    def streaming_create(self, **kwargs: Any) -> Any:
        body, options = split_options(kwargs)
        call = body_caller(self._create, self._params, options)
        manager = body_caller(self._resource.with_streaming_response.create, self._params,
                              options)(body)

        async def guarded(parsed: Any) -> Any:
            async def first(_body: JsonObject) -> Any:
                return parsed  # the request went out on entry
            return await complete_async(self._guard, body, call, self._door, self._dialect,
                                        first)
        return AsyncGuardedStreamingContext(manager, guarded, self._guard)


def unguarded_attribute(guard: Guard, resource: Any, name: str) -> Any:
    """The wrapped resource's own attribute; a model call the guard does not cover is
    counted and logged at WARNING, never silent."""
    if name in UNGUARDED_CALLS:
        guard.telemetry.warning_fallback("call_not_guarded", method=name,
                                         resource=type(resource).__name__)
    return getattr(resource, name)


class RawResource:
    """A resource's `with_raw_response` / `with_streaming_response`: `create` guarded, the
    SDK's other raw methods as they are (`parse` and `stream` counted, unguarded)."""

    def __init__(self, owner: GuardedCreate, sdk: Any, create: Any) -> None:
        self._guard = owner._guard
        self._sdk = sdk
        self.create = create

    def __getattr__(self, name: str) -> Any:
        return unguarded_attribute(self._guard, self._sdk, name)
