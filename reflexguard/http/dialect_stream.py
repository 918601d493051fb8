"""A guarded Messages or Responses stream: text through at once, calls held and repaired.

An I/O edge. The upstream's stream (native events, or chat chunks when translated) is
read into the core's chat chunks and the chat `StreamAssembler` decides what text may
pass now (text that could open a call written as text is held, as for chat). Released text
is written at once in the dialect's grammar; at the end the calls are validated, repaired
with non-streamed requests if needed, and written as whole, well-formed events.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from reflexguard.core import json_text
from reflexguard.core.attempts import read_attempt
from reflexguard.core.choice import agent_completion, returned_attempt
from reflexguard.core.model import as_object
from reflexguard.dialects.chat_stream import StreamAssembler
from reflexguard.dialects.native import NATIVE_KEY, Dialect, DialectRequest
from reflexguard.dialects.native_stream import (
    MessagesEvents,
    MessagesWriter,
    ResponsesEvents,
    ResponsesWriter,
    messages_error_event,
    responses_error_event,
)
from reflexguard.http.call import exhausted_message
from reflexguard.http.client_stream import EVENT_STREAM, ClientGone, ClientStream
from reflexguard.http.context import GuardContext
from reflexguard.http.dialect_call import DialectCall, dialect_error, dialect_upstream_error
from reflexguard.http.sse import STREAM_FAULTS, SseObjects, StreamBroken, sse_lines
from reflexguard.http.stream_clean import clean_first
from reflexguard.http.upstream import UpstreamFailure

Events = MessagesEvents | ResponsesEvents
Writer = MessagesWriter | ResponsesWriter


class _ChatEvents:
    """A translated upstream's chat chunks, already in the core's form."""

    def __init__(self) -> None:
        self.done = False  # a chat stream ends with `[DONE]`, which SseObjects reads
        self.forward: list[dict[str, Any]] = []  # never any: chat has no reasoning to pass
        self.reasoning: list[dict[str, Any]] = []

    def chunks(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        return [data]


def _delta_of(chunk: dict[str, Any]) -> dict[str, Any]:
    """The first choice's delta, whatever shape `choices` came in."""
    choices = chunk.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return as_object(as_object(first).get("delta"))


def _error_end(dialect: str, writer: list[Writer], message: str) -> bytes:
    """The event that ends a started stream on a failure, in its dialect's grammar (never a
    chat-format line on a Messages or Responses stream): Responses' `error` numbered after
    the events already written."""
    if dialect == "messages":
        return messages_error_event(message)
    if writer and isinstance(writer[0], ResponsesWriter):
        return writer[0].error(message)
    return responses_error_event(message)


def _count_oddities(call: DialectCall, events: Events | _ChatEvents) -> None:
    """Fields the native reader had to read leniently (null, a string, missing): counted
    once per kind and stream, and logged."""
    for field in getattr(events, "oddities", ()):
        call.guard.telemetry.fallback("odd_stream_field", field=field, dialect=call.dialect,
                                      request_id=call.request_id)


def _writer(call: DialectCall, template: dict[str, Any]) -> Writer:
    if call.dialect == "messages":
        return MessagesWriter(template)
    return ResponsesWriter(template)


def _skeleton(call: DialectCall, events: Events | _ChatEvents) -> dict[str, Any]:
    """What message_start / response.created shows: the upstream's own when native."""
    if not isinstance(events, _ChatEvents):
        return events.skeleton
    empty = {"choices": [{"index": 0, "message": {"content": None}}]}
    reply = call.dialect_spec.native_of(empty, call.request.body, None)
    return {**reply, "usage": {"input_tokens": 0, "output_tokens": 0}}


async def _read(call: DialectCall, upstream: aiohttp.ClientResponse, events: Events | _ChatEvents,
                assembler: StreamAssembler, out: ClientStream,
                writer: list[Writer]) -> str | None:
    """Feed the upstream stream to the assembler, writing released text; why it broke."""
    reader = SseObjects(call.guard, call.request_id)
    try:
        async for batch in reader.batches(upstream.content):
            # What one network read released goes out in one write (as for chat).
            released: list[bytes] = []
            broken = _released(call, batch, events, assembler, writer, released)
            if released:
                await out.write(b"".join(released))
            if broken is not None:
                return broken
    except StreamBroken as exc:
        return str(exc)
    except STREAM_FAULTS as exc:
        return f"upstream stream was cut off ({type(exc).__name__})"
    # A native stream ends with its own closing event, a chat one with `[DONE]`.
    if not (events.done or reader.done) and assembler.finish_reason is None:
        return "upstream stream ended before the reply finished"
    return None


def _released(call: DialectCall, batch: list[tuple[bytes, dict[str, Any]]],
              events: Events | _ChatEvents, assembler: StreamAssembler, writer: list[Writer],
              released: list[bytes]) -> str | None:
    """Feed one network read's events to the assembler, appending to `released` the
    bytes they let through now; the upstream's error, if one came."""
    for _, data in batch:
        if "error" in data or data.get("type") in ("error", "response.failed"):
            return f"upstream error mid-stream: {str(data.get('error'))[:200]}"
        for chunk in events.chunks(data):
            call.margins.collect(chunk)  # translated chat chunks only (native: off)
            forward = assembler.feed(chunk)
            if not writer:
                writer.append(_writer(call, _skeleton(call, events)))
            text = _delta_of(chunk)
            if forward and isinstance(text.get("content"), str) and text["content"]:
                released.extend(writer[0].text(text["content"]))
            if assembler.pending_flush is not None:
                released.extend(writer[0].text(assembler.pending_flush))
                assembler.pending_flush = None
        if events.forward:  # thinking / reasoning: written as it comes, never held
            if not writer:
                writer.append(_writer(call, _skeleton(call, events)))
            for forwarded in events.forward:
                released.extend(writer[0].forward(forwarded))
            events.forward.clear()
    return None


async def dialect_stream(call: DialectCall, request: web.Request) -> web.StreamResponse:
    out = ClientStream(request, headers={**EVENT_STREAM, **call.budget_headers()})
    writer: list[Writer] = []
    try:
        try:
            async with asyncio.timeout_at(call.deadline):
                return await _guarded(call, out, writer)
        except TimeoutError:
            failure = call.deadline_failure()
            if not out.started:
                return dialect_upstream_error(call.dialect_spec, failure, call.native)
            return await out.end(_error_end(call.dialect, writer, str(failure)))
        except UpstreamFailure as exc:
            if not out.started:
                return dialect_upstream_error(call.dialect_spec, exc, call.native)
            return await out.end(_error_end(call.dialect, writer, str(exc)))
        except (ClientGone, asyncio.CancelledError):
            raise
        except Exception:
            # A fault of ours: logged and counted, and said in the dialect's own format,
            # as a status before the first byte, as its error event after.
            call.guard.telemetry.log.exception("stream_failed", request_id=call.request_id,
                                               dialect=call.dialect)
            call.guard.telemetry.fallback("stream_internal_error", request_id=call.request_id)
            if not out.started:
                return dialect_error(call.dialect_spec, 500, "internal error in reflexguard; "
                                     "see its log", code="internal")
            return await out.end(_error_end(call.dialect, writer,
                                            "internal error in reflexguard"))
    except ClientGone:
        call.guard.telemetry.client_gone(request_id=call.request_id, session=call.session)
        return out.response


async def _guarded(call: DialectCall, out: ClientStream,
                   writer: list[Writer]) -> web.StreamResponse:
    guard = call.guard
    assembler = StreamAssembler(hold_all_text=guard.policy.lift_text_calls)
    events: Events | _ChatEvents
    if call.native:
        events = MessagesEvents() if call.dialect == "messages" else ResponsesEvents()
        path, raw = call.path, call.raw_native
    else:
        events = _ChatEvents()
        path = "chat/completions"
        # stream and include_usage set by the translation; logprobs if margins are on
        raw = orjson.dumps(call.margins.body(call.chat.body))
    began = time.perf_counter()
    async with guard.upstream.stream(path, raw, call.headers) as upstream:
        broken = await _read(call, upstream, events, assembler, out, writer)
    _count_oddities(call, events)
    if broken is not None:
        guard.telemetry.fallback("upstream_stream_cut", request_id=call.request_id,
                                 dialect=call.dialect)
        if not out.started:
            return dialect_error(call.dialect_spec, 502, broken, code="upstream_stream_error")
        return await out.end(_error_end(call.dialect, writer, broken))
    completion = call.margins.assembled(assembler.completion())
    template = None if isinstance(events, _ChatEvents) else events.skeleton
    if template is not None:
        # The native reply's own words beside the chat view, as a non-streamed answer has
        # them: its span says the provider's stop_reason ("tool_use"), not ours (issue 30).
        completion = {**completion, NATIVE_KEY: template}
    call.reasoning = list(events.reasoning)  # echoed by a re-ask of this reply
    clean = clean_first(call, completion, time.perf_counter() - began)
    if clean is not None:
        result, first, message = clean, clean.final, None
    else:  # not every call is ok: the full reading and the ladder
        first = call.damaged(read_attempt(1, "initial", completion, call.rules,
                                          guard.policy.lift_text_calls,
                                          time.perf_counter() - began))
        result = await call.ladder(first)
        headers = call.finish(result)
        message = exhausted_message(result, call.policy.on_exhausted)
        if message is not None and not out.started:
            return dialect_error(call.dialect_spec, 502, message,
                                 code="tool_call_repair_exhausted", headers=headers)
    if not writer:
        writer.append(_writer(call, _skeleton(call, events)))
    if message is not None:
        return await out.end(_error_end(call.dialect, writer, message))
    final = returned_attempt(result, call.policy.on_exhausted)
    outgoing = agent_completion(result, final)
    native_template = template if final is first else final.completion.get(NATIVE_KEY)
    reply = call.dialect_spec.native_of(outgoing, call.request.body, native_template)
    if final.number == 1:
        text = final.reply.content if final.lifted else assembler.held_text
    else:
        text = as_object(as_object(outgoing["choices"][0]).get("message")).get("content")
    # The held calls and the end in one write: the agent reads them in one piece.
    return await out.end(b"".join(writer[0].finish(reply, text if isinstance(text, str)
                                                   else None)))


async def translated_plain_stream(call_guard: GuardContext, request: web.Request,
                                  parsed: DialectRequest, dialect: Dialect,
                                  headers: dict[str, str]) -> web.StreamResponse:
    """A stream without tools to a chat-only upstream: nothing to validate, so every text
    delta is written at once in the dialect's grammar."""
    out = ClientStream(request)
    assembler = StreamAssembler()
    empty = {"choices": [{"index": 0, "message": {"content": None}}]}
    skeleton = {**dialect.native_of(empty, parsed.body, None),
                "usage": {"input_tokens": 0, "output_tokens": 0}}
    writer: Writer = (MessagesWriter(skeleton) if dialect.name == "messages"
                      else ResponsesWriter(skeleton))

    def error_event(message: str) -> bytes:
        return _error_end(dialect.name, [writer], message)

    try:
        async with call_guard.upstream.stream("chat/completions",
                                              orjson.dumps(parsed.chat.body),
                                              headers) as upstream:
            async for line in sse_lines(upstream.content, call_guard.settings.max_body_bytes,
                                        call_guard.settings.max_answer_bytes):
                line = line.strip()
                if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                try:
                    chunk = json_text.loads(line[5:].strip())
                except ValueError:
                    continue
                if not isinstance(chunk, dict):
                    continue
                assembler.feed(chunk)
                delta = _delta_of(chunk)
                if isinstance(delta.get("content"), str) and delta["content"]:
                    await out.write(b"".join(writer.text(delta["content"])))
        reply = dialect.native_of(assembler.completion(), parsed.body, None)
        for data in writer.finish({**reply, "content": []} if dialect.name == "messages"
                                  else {**reply, "output": []}, None):
            await out.write(data)
        return await out.end()
    except ClientGone:
        call_guard.telemetry.client_gone(path=request.path)
        return out.response
    except UpstreamFailure as exc:
        if not out.started:
            return dialect_upstream_error(dialect, exc, native=False)
        await out.write(error_event(str(exc)))
        return await out.end()
    except (*STREAM_FAULTS, StreamBroken) as exc:
        call_guard.telemetry.fallback("upstream_stream_cut", path=request.path)
        why = str(exc) if isinstance(exc, StreamBroken) else "upstream stream was cut off"
        if not out.started:
            return dialect_error(dialect, 502, why)
        await out.write(error_event(why))
        return await out.end()
