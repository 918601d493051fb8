"""The guarded chat stream: text deltas reach the client as they arrive; tool-call deltas
are held until the choice finishes, validated, repaired with non-streamed requests if
needed, and then written as well-formed chunks ending with `finish_reason` and `[DONE]`.
This is an I/O edge.

Reading the upstream's events is http/sse.py's, writing to the agent
http/client_stream.py's; the native dialects' guarded streams are http/dialect_stream.py.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
from aiohttp import web

from reflexguard.core.attempts import read_attempt
from reflexguard.core.choice import returned_attempt
from reflexguard.dialects.chat_stream import (
    DONE,
    StreamAssembler,
    closing_chunk_bodies,
    replayable_text_chunk,
    sse,
    text_chunk,
)
from reflexguard.http.call import GuardedCall
from reflexguard.http.client_stream import (
    EVENT_STREAM,
    ClientGone,
    ClientStream,
    chat_error_end,
    end_stream_with_error,
)
from reflexguard.http.passthrough import byte_stream
from reflexguard.http.responses import json_error, upstream_error
from reflexguard.http.sse import STREAM_FAULTS, SseObjects, StreamBroken
from reflexguard.http.stream_clean import clean_first
from reflexguard.http.upstream import UpstreamFailure

# Held undecided text is replayed as the upstream's own events up to this many bytes; past
# it (a stream of whitespace, say) it is written as one chunk of ours, as before.
MAX_REPLAY_BYTES = 64 * 1024


async def _read_upstream(call: GuardedCall, upstream: aiohttp.ClientResponse,
                         assembler: StreamAssembler, out: ClientStream) -> str | None:
    """Feed the upstream's events to the assembler; the reason if the stream broke."""
    reader = SseObjects(call.guard, call.request_id)
    # The upstream's own events of text held while its head was undecided (whitespace, a
    # `<` that might open `<tool_call>`): replayed as they came once the head rules out a
    # call, so text that is no call reaches the agent byte for byte. None: not replayable.
    held: list[bytes] | None = []
    held_bytes = 0
    try:
        async for batch in reader.batches(upstream.content):
            # What one network read released goes out in one write: the same bytes, with
            # no wait for anything that has not arrived.
            released: list[bytes] = []
            for payload, chunk in batch:
                if "error" in chunk:
                    if released:
                        await out.write(b"".join(released))
                    message = chunk["error"].get("message") \
                        if isinstance(chunk["error"], dict) else str(chunk["error"])
                    return f"upstream error mid-stream: {message}"
                call.margins.collect(chunk)
                if assembler.feed(chunk):
                    released.append(sse(call.margins.passed_on(payload, chunk)))
                elif held is not None and not (assembler.released_text
                                               and assembler.pending_flush is None):
                    event = sse(call.margins.passed_on(payload, chunk))
                    held_bytes += len(event)
                    if replayable_text_chunk(chunk) and held_bytes <= MAX_REPLAY_BYTES:
                        held.append(event)
                    else:
                        held = None
                if assembler.pending_flush is not None:
                    released.extend(held if held is not None else
                                    [text_chunk(assembler.template, assembler.pending_flush)])
                    assembler.pending_flush = None
                    held = None
            if released:
                await out.write(b"".join(released))
    except StreamBroken as exc:
        return str(exc)
    except STREAM_FAULTS as exc:
        return f"upstream stream was cut off ({type(exc).__name__})"
    if not assembler.template:
        return "upstream stream carried no chat-completion chunk"
    if not reader.done and assembler.finish_reason is None:
        return "upstream stream ended before the reply finished"
    return None


async def guarded_stream(call: GuardedCall, request: web.Request) -> web.StreamResponse:
    guard = call.guard
    body = call.chat.body
    if isinstance(body.get("n"), int) and body["n"] > 1:
        guard.telemetry.fallback("multiple_choices_stream_not_guarded",
                                 request_id=call.request_id)
        return await byte_stream(guard, request, call.client_raw, call.headers)
    out = ClientStream(request, headers={**EVENT_STREAM, **call.budget_headers()})
    try:
        async with asyncio.timeout_at(call.deadline):
            return await _guarded(call, out)
    except ClientGone:
        guard.telemetry.client_gone(request_id=call.request_id, session=call.session)
        return out.response
    except TimeoutError:
        failure = call.deadline_failure()
        if not out.started:
            return upstream_error(failure)
        return await end_stream_with_error(out.response, str(failure), "upstream_timeout")
    except UpstreamFailure as exc:
        if not out.started:
            return upstream_error(exc)
        return await end_stream_with_error(out.response, str(exc), "upstream_error")
    except Exception:
        if not out.started:
            raise  # the middleware answers with a JSON 500 and logs it
        guard.telemetry.log.exception("stream_failed", request_id=call.request_id)
        guard.telemetry.fallback("stream_internal_error", request_id=call.request_id)
        return await end_stream_with_error(out.response, "internal error in reflexguard")


async def _guarded(call: GuardedCall, out: ClientStream) -> web.StreamResponse:
    guard = call.guard
    assembler = StreamAssembler(hold_all_text=guard.policy.lift_text_calls)
    began = time.perf_counter()
    async with guard.upstream.stream("chat/completions", call.raw, call.headers) as upstream:
        broken = await _read_upstream(call, upstream, assembler, out)
    if broken is not None:
        guard.telemetry.fallback("upstream_stream_cut", request_id=call.request_id,
                                 session=call.session)
        if not out.started:
            return json_error(502, broken, code="upstream_stream_error")
        return await out.end(chat_error_end(broken))
    completion = call.margins.assembled(assembler.completion())
    result = clean_first(call, completion, time.perf_counter() - began)
    if result is None:  # not every call is ok: the full reading and the ladder
        first = call.damaged(read_attempt(1, "initial", completion, call.rules,
                                          guard.policy.lift_text_calls,
                                          time.perf_counter() - began))
        result = await call.ladder(first)
        call.finish(result)
        failure = call.exhausted_error(result)
        if failure is not None:
            return await out.end(sse(failure) + DONE)
    final = returned_attempt(result, call.policy.on_exhausted)
    closing = [sse(orjson.dumps(body)) for body in closing_chunk_bodies(assembler, result, final)]
    return await out.end(b"".join([*closing, DONE]))
