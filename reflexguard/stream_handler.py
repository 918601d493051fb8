"""The streaming edge: byte pass-through, and guarded streams of tool calls.

Text deltas reach the client as they arrive; tool-call deltas are held until the choice
finishes, validated, repaired with non-streamed requests if needed, and then written as
well-formed chunks ending with `finish_reason` and `[DONE]`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import aiohttp
import orjson
from aiohttp import web

from reflexguard.completion import choices_of, reply_of
from reflexguard.guard import agent_completion, read_attempt, returned_attempt
from reflexguard.responses import upstream_error
from reflexguard.streaming import StreamAssembler, error_event, reply_chunks, sse, text_chunk
from reflexguard.upstream import UpstreamFailure

if TYPE_CHECKING:
    from reflexguard.server import Guard, GuardedCall

EVENT_STREAM = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
STREAM_FAULTS = (aiohttp.ClientError, asyncio.TimeoutError)


async def byte_stream(guard: Guard, request: web.Request, raw: bytes, headers: dict[str, str],
                      path: str = "chat/completions") -> web.StreamResponse:
    """A stream reflexguard does not guard: the upstream's bytes, untouched."""
    try:
        async with guard.upstream.stream(path, raw, headers) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={"Content-Type": upstream.headers.get("Content-Type", "text/event-stream"),
                         "Cache-Control": "no-cache"},
            )
            await response.prepare(request)
            try:
                async for data in upstream.content.iter_any():
                    await response.write(data)
            except STREAM_FAULTS:
                guard.telemetry.fallback("upstream_stream_cut", path=path)
                await response.write(error_event("upstream stream was cut off"))
            except ConnectionResetError:
                guard.telemetry.fallback("client_disconnected", path=path)
                return response
            await response.write_eof()
            return response
    except UpstreamFailure as exc:
        return upstream_error(exc)


async def _read_upstream(call: GuardedCall, upstream: aiohttp.ClientResponse,
                         assembler: StreamAssembler, response: web.StreamResponse) -> str | None:
    """Feed the upstream's events to the assembler; the reason if the stream broke."""
    done = False
    try:
        async for line in upstream.content:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                call.guard.telemetry.fallback("unparseable_stream_chunk",
                                              request_id=call.request_id)
                continue
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                message = chunk["error"].get("message") if isinstance(chunk["error"], dict) \
                    else str(chunk["error"])
                return f"upstream error mid-stream: {message}"
            if assembler.feed(chunk):
                await response.write(sse(payload))
            if assembler.pending_flush is not None:
                await response.write(text_chunk(assembler.template, assembler.pending_flush))
                assembler.pending_flush = None
    except STREAM_FAULTS as exc:
        return f"upstream stream was cut off ({type(exc).__name__})"
    if not done and assembler.finish_reason is None:
        return "upstream stream ended before the reply finished"
    return None


async def guarded_stream(call: GuardedCall, request: web.Request) -> web.StreamResponse:
    guard = call.guard
    body = call.chat.body
    if isinstance(body.get("n"), int) and body["n"] > 1:
        guard.telemetry.fallback("multiple_choices_stream_not_guarded",
                                 request_id=call.request_id)
        return await byte_stream(guard, request, call.raw, call.headers)
    assembler = StreamAssembler(hold_all_text=guard.policy.lift_text_calls)
    began = time.perf_counter()
    try:
        async with guard.upstream.stream("chat/completions", call.raw, call.headers) as upstream:
            response = web.StreamResponse(status=200, headers=EVENT_STREAM)
            await response.prepare(request)
            try:
                broken = await _read_upstream(call, upstream, assembler, response)
            except ConnectionResetError:
                # The agent went away mid-stream: nothing to repair for, nobody to answer.
                guard.telemetry.fallback("client_disconnected", request_id=call.request_id,
                                         session=call.session)
                return response
    except UpstreamFailure as exc:
        return upstream_error(exc)
    if broken is not None:
        guard.telemetry.fallback("upstream_stream_cut", request_id=call.request_id,
                                 session=call.session)
        await response.write(error_event(broken))
        await response.write_eof()
        return response
    first = read_attempt(1, "initial", assembler.completion(), call.rules,
                         guard.policy.lift_text_calls, time.perf_counter() - began)
    result = await call.ladder(first)
    call.finish(result)
    failure = call.exhausted_error(result)
    if failure is not None:
        await response.write(sse(failure))
        await response.write_eof()
        return response
    final = returned_attempt(result, guard.settings.on_exhausted)
    outgoing = agent_completion(result, final)
    choices = choices_of(outgoing)
    reply = reply_of(choices[0]) if choices else final.reply
    if final.number == 1:
        text = reply.content if final.lifted else assembler.held_text
    else:
        text = reply.content
    usage = outgoing.get("usage") if assembler.usage is not None else None
    for event in reply_chunks(assembler.template, reply, text, usage):
        await response.write(event)
    await response.write_eof()
    return response
