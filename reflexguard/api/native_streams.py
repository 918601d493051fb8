"""A guarded Messages or Responses stream in the caller's process, as the proxy guards one
(`reflexguard.http.dialect_stream`): text through at once, calls held and repaired.

An I/O edge only through the SDK stream it reads. The SDK's event objects are read as the
dialect's JSON into the core's chat chunks (`MessagesEvents` / `ResponsesEvents`); the
chat `StreamAssembler` decides what text may pass now; released text, thinking and
reasoning are written at once by the dialect's writer, and at the end the calls are
validated, repaired with non-streamed requests if needed, and written as whole events.
Every event handed out is the SDK's own event type, built as the SDK's stream builds it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any

import orjson

from reflexguard.api.drive import AsyncCall, Door, SyncCall, settle_async, settle_sync
from reflexguard.api.engine import GuardedRequest
from reflexguard.core.attempts import Attempt, LadderResult
from reflexguard.core.choice import agent_completion, returned_attempt
from reflexguard.core.model import JsonObject, as_object
from reflexguard.dialects.chat_stream import StreamAssembler
from reflexguard.dialects.native import NATIVE_KEY
from reflexguard.dialects.native_stream import (
    MessagesEvents,
    MessagesWriter,
    ResponsesEvents,
    ResponsesWriter,
)

Event = Callable[[JsonObject], Any]  # one event's JSON -> the SDK's event object


def _data(frames: list[bytes]) -> list[JsonObject]:
    """The JSON of each SSE frame the dialect's writer produced."""
    out: list[JsonObject] = []
    for frame in b"".join(frames).split(b"\n\n"):
        for line in frame.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(orjson.loads(line[6:]))
    return out


class NativeStreamGuard:
    """One native stream's bookkeeping; the sync and async drivers own the iteration."""

    def __init__(self, request: GuardedRequest, event: Event) -> None:
        assert request.dialect is not None
        self.request = request
        self.messages = request.dialect.name == "messages"
        self.events: MessagesEvents | ResponsesEvents = (
            MessagesEvents() if self.messages else ResponsesEvents())
        self.assembler = StreamAssembler(hold_all_text=request.policy.lift_text_calls)
        self.writer: MessagesWriter | ResponsesWriter | None = None
        self.event = event
        self.began = time.perf_counter()

    def _writer(self) -> MessagesWriter | ResponsesWriter:
        if self.writer is None:
            skeleton = self.events.skeleton
            self.writer = MessagesWriter(skeleton) if self.messages else ResponsesWriter(skeleton)
        return self.writer

    def _out(self, frames: list[bytes]) -> list[Any]:
        return [self.event(data) for data in _data(frames)]

    def feed(self, sdk_event: Any) -> list[Any]:
        data: JsonObject = sdk_event.model_dump(mode="json", exclude_unset=True,
                                                warnings=False)
        if data.get("type") in ("error", "response.failed"):
            self._cut(f"upstream error mid-stream: {str(data.get('error'))[:200]}")
        out: list[Any] = []
        for chunk in self.events.chunks(data):
            forward = self.assembler.feed(chunk)
            writer = self._writer()
            delta = as_object(as_object((chunk.get("choices") or [{}])[0]).get("delta"))
            text = delta.get("content")
            if forward and isinstance(text, str) and text:
                out += self._out(writer.text(text))
            if self.assembler.pending_flush is not None:
                out += self._out(writer.text(self.assembler.pending_flush))
                self.assembler.pending_flush = None
        for forwarded in self.events.forward:  # thinking / reasoning: never held
            out += self._out(self._writer().forward(forwarded))
        self.events.forward.clear()
        return out

    def first(self) -> Attempt:
        if not self.events.done and self.assembler.finish_reason is None:
            self._cut("upstream stream ended before the reply finished")
        # The re-ask echoes this reply's thinking / reasoning, as the proxy's does.
        key = "content" if self.messages else "output"
        self.request.latest = {**self.events.skeleton, key: list(self.events.reasoning)}
        return self.request.first(self.assembler.completion(),
                                  time.perf_counter() - self.began)

    def closing(self, first: Attempt, result: LadderResult) -> list[Any]:
        request = self.request
        assert request.dialect is not None
        request.observe(result)  # raises RepairExhausted under on_exhausted: error
        final = returned_attempt(result, request.policy.on_exhausted)
        outgoing = agent_completion(result, final)
        template = self.events.skeleton if final is first else final.completion.get(NATIVE_KEY)
        reply = request.dialect.native_of(outgoing, request.body,
                                          template if isinstance(template, dict) else None)
        if final.number == 1:
            text = final.reply.content if final.lifted else self.assembler.held_text
        else:
            message = as_object(as_object(outgoing["choices"][0]).get("message"))
            text = message.get("content")
        return self._out(self._writer().finish(reply, text if isinstance(text, str) else None))

    def _cut(self, reason: str) -> None:
        raise self.request.stream().broken(reason)


def native_stream_sync(request: GuardedRequest, upstream: Any, call: SyncCall, door: Door,
                       event: Event) -> Generator[Any, None, None]:
    guard = NativeStreamGuard(request, event)
    try:
        for sdk_event in upstream:
            yield from guard.feed(sdk_event)
    except door.failures as exc:
        guard._cut(f"upstream stream was cut off ({type(exc).__name__})")
    finally:
        close = getattr(upstream, "close", None)
        if callable(close):
            close()
    first = guard.first()
    yield from guard.closing(first, settle_sync(request, first, call, door))


async def native_stream_async(request: GuardedRequest, upstream: Any, call: AsyncCall,
                              door: Door, event: Event) -> AsyncGenerator[Any, None]:
    guard = NativeStreamGuard(request, event)
    try:
        async for sdk_event in upstream:
            for out in guard.feed(sdk_event):
                yield out
    except door.failures as exc:
        guard._cut(f"upstream stream was cut off ({type(exc).__name__})")
    finally:
        close = getattr(upstream, "close", None)
        if callable(close):
            await close()
    first = guard.first()
    for out in guard.closing(first, await settle_async(request, first, call, door)):
        yield out
