"""An SDK resource whose `create` is guarded, whichever SDK and wire format it speaks.

An I/O edge (the SDK does the I/O). Every attribute but `create` is the wrapped
resource's own. The caller's keyword arguments and lists are never mutated: the body is
a new dict, and re-asks build new lists.
"""

from __future__ import annotations

import inspect
from typing import Any

from reflexguard.api.drive import Door, complete_async, complete_sync
from reflexguard.api.engine import Guard
from reflexguard.core.model import JsonObject
from reflexguard.dialects.native import Dialect

# Keyword arguments that steer the SDK's request rather than being part of the body.
REQUEST_OPTIONS = ("extra_headers", "extra_query", "timeout")


def body_params(create: Any) -> frozenset[str]:
    return frozenset(inspect.signature(create).parameters) - {"extra_body", *REQUEST_OPTIONS}


def split_options(kwargs: dict[str, Any]) -> tuple[JsonObject, dict[str, Any]]:
    """(the request body, the SDK's request options) from `create`'s keyword arguments."""
    options = {k: kwargs[k] for k in REQUEST_OPTIONS if k in kwargs}
    body = {k: v for k, v in kwargs.items() if k not in REQUEST_OPTIONS and k != "extra_body"}
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
                failures: tuple[type[BaseException], ...]) -> Door:
    """The door of a native dialect's SDK: its reply object read as the dialect's JSON and
    then into the core's view (`completion_of`, as the proxy's native mode reads it); a
    native reply written back as the SDK's type, built as the SDK builds its own."""
    def to_dict(reply: Any) -> JsonObject:
        native: JsonObject = reply.model_dump(mode="json", exclude_unset=True, warnings=False)
        return dialect.completion_of(native)

    def written(body: JsonObject) -> Any:
        return reply_type.construct(**body)

    return Door(to_dict=to_dict, completion=written, chunk=written, failures=failures)


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

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resource, name)


class AsyncGuardedCreate(GuardedCreate):
    async def create(self, **kwargs: Any) -> Any:
        body, options = split_options(kwargs)
        call = body_caller(self._create, self._params, options)
        return await complete_async(self._guard, body, call, self._door, self._dialect)
