"""Driving one guarded call through a client, sync or async, streamed or not.

An I/O edge: `call` is the client's own create function, made to take a plain body.
The first answer is the caller's request as sent; re-asks go through the same `call`,
never streamed. With a `dialect` (Messages, Responses) the body and the client's objects
are that dialect's, and the door reads them into the core's view. A first answer that
needs no repair is returned as the client's own object, untouched; otherwise the client's
own type is rebuilt from the ladder's answer.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from reflexguard.api.engine import FORWARD, Guard, GuardedRequest, StreamGuard, run_blocking
from reflexguard.api.streams import AsyncGuardedStream, GuardedStream
from reflexguard.core.attempts import Attempt, LadderResult, UpstreamFailure
from reflexguard.core.model import JsonObject
from reflexguard.dialects.native import Dialect

SyncCall = Callable[[JsonObject], Any]
AsyncCall = Callable[[JsonObject], Awaitable[Any]]


@dataclass(frozen=True)
class Door:
    """How one client's objects are read and written."""

    to_dict: Callable[[Any], JsonObject]  # the client's completion or chunk, as plain JSON
    completion: Callable[[JsonObject], Any]  # plain JSON, as the client's completion type
    chunk: Callable[[JsonObject], Any]  # plain JSON, as the client's chunk type
    failures: tuple[type[BaseException], ...]  # a re-ask's errors the ladder falls back on
    # A native (Messages, Responses) stream guarded: (request, the SDK's stream, call,
    # door) -> the guarded events (reflexguard.api.native_streams); None: not guarded.
    native_sync: Callable[..., Generator[Any, None, None]] | None = None
    native_async: Callable[..., AsyncGenerator[Any, None]] | None = None


def _async_send(call: AsyncCall, door: Door) -> Callable[[JsonObject], Awaitable[JsonObject]]:
    async def send(body: JsonObject) -> JsonObject:
        try:
            return door.to_dict(await call(body))
        except door.failures as exc:
            raise UpstreamFailure(str(exc)) from exc
    return send


def _blocking_send(call: SyncCall, door: Door) -> Callable[[JsonObject], Awaitable[JsonObject]]:
    async def send(body: JsonObject) -> JsonObject:
        # Blocks the ladder's private loop, which serves this one call only.
        try:
            return door.to_dict(call(body))
        except door.failures as exc:
            raise UpstreamFailure(str(exc)) from exc
    return send


def settle_sync(request: GuardedRequest, first: Attempt, call: SyncCall,
                 door: Door) -> LadderResult:
    settled = request.settled(first)
    if settled is not None:
        return settled
    send = _blocking_send(call, door)
    return run_blocking(lambda: request.ladder(first, send))


async def settle_async(request: GuardedRequest, first: Attempt, call: AsyncCall,
                        door: Door) -> LadderResult:
    settled = request.settled(first)
    if settled is not None:
        return settled
    return await request.ladder(first, _async_send(call, door))


def _passthrough_stream(request: GuardedRequest) -> bool:
    if request.dialect is not None:
        # A native stream whose door has no stream guard reaches the caller as the SDK's
        # own stream, unguarded (counted, logged at WARNING).
        request.guard.telemetry.warning_fallback("stream_not_guarded_inprocess",
                                                 request_id=request.request_id,
                                                 dialect=request.dialect_name)
        return True
    if not request.multiple_choices:
        return False
    request.guard.telemetry.warning_fallback("multiple_choices_stream_not_guarded",
                                             request_id=request.request_id)
    return True


def complete_sync(guard: Guard, body: JsonObject, call: SyncCall, door: Door,
                  dialect: Dialect | None = None, first_call: SyncCall | None = None) -> Any:
    """`first_call`, when given, sends the caller's request (a raw-response path that
    keeps the SDK's response object); re-asks always go through `call`."""
    send_first = first_call or call
    request = guard.request(body, dialect)
    if request is None:
        return send_first(body)
    if request.chat.stream:
        if request.dialect is not None and door.native_sync is not None:
            return GuardedStream(door.native_sync(request, send_first(body), call, door))
        if _passthrough_stream(request):
            return send_first(body)
        return GuardedStream(_stream_sync(request, send_first, call, door))
    began = time.perf_counter()
    response = send_first(body)
    first = request.first(door.to_dict(response), time.perf_counter() - began)
    answer = request.answer(settle_sync(request, first, call, door))
    return response if answer is None else door.completion(answer)


async def complete_async(guard: Guard, body: JsonObject, call: AsyncCall, door: Door,
                         dialect: Dialect | None = None,
                         first_call: AsyncCall | None = None) -> Any:
    send_first = first_call or call
    request = guard.request(body, dialect)
    if request is None:
        return await send_first(body)
    if request.chat.stream:
        if request.dialect is not None and door.native_async is not None:
            return AsyncGuardedStream(door.native_async(request, await send_first(body), call,
                                                        door))
        if _passthrough_stream(request):
            return await send_first(body)
        return AsyncGuardedStream(stream_async(request, await send_first(body), call, door))
    began = time.perf_counter()
    response = await send_first(body)
    first = request.first(door.to_dict(response), time.perf_counter() - began)
    answer = request.answer(await settle_async(request, first, call, door))
    return response if answer is None else door.completion(answer)


def _stream_sync(request: GuardedRequest, first_call: SyncCall, call: SyncCall,
                 door: Door) -> Generator[Any, None, None]:
    stream = request.stream()
    upstream = first_call(request.chat.body)

    def chunks() -> Generator[Any, None, None]:
        try:
            for chunk in upstream:
                yield from _emit(stream, chunk, door)
        except door.failures as exc:
            raise stream.broken(f"upstream stream was cut off ({type(exc).__name__})") from exc
        finally:  # also when the caller closes the guarded stream early
            close = getattr(upstream, "close", None)
            if callable(close):
                close()
        result = settle_sync(request, stream.first(), call, door)
        for body in stream.closing(result):
            yield door.chunk(body)
    return chunks()


async def stream_async(request: GuardedRequest, upstream: Any, call: AsyncCall,
                       door: Door) -> AsyncGenerator[Any, None]:
    stream = request.stream()
    try:
        async for chunk in upstream:
            for out in _emit(stream, chunk, door):
                yield out
    except door.failures as exc:
        raise stream.broken(f"upstream stream was cut off ({type(exc).__name__})") from exc
    finally:  # also when the caller closes the guarded stream early
        close = getattr(upstream, "close", None)
        closing = close() if callable(close) else None
        if inspect.isawaitable(closing):
            await closing
    result = await settle_async(request, stream.first(), call, door)
    for body in stream.closing(result):
        yield door.chunk(body)


def _emit(stream: StreamGuard, chunk: Any, door: Door) -> Iterator[Any]:
    for out in stream.feed(door.to_dict(chunk)):
        yield chunk if out is FORWARD else door.chunk(out)

