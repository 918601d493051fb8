"""The streaming edge: byte pass-through, and guarded streams of tool calls.

Text deltas reach the client as they arrive; tool-call deltas are held until the choice
finishes, validated, repaired with non-streamed requests if needed, and then written as
well-formed chunks ending with `finish_reason` and `[DONE]`.

Headers go out with the first byte worth sending, not before: a stream that fails or
carries nothing usable before that still gets a proper JSON error status. Once headers
are out, every failure becomes an error event and a clean end, never a second response.
Writes to the client are the only place a client disconnect is read: `ClientGone` is
not an aiohttp `ClientError`, so it can never be mistaken for an upstream fault.

Upstream SSE lines are split here (`sse_lines`), not by aiohttp's readline: its line limit
(twice the read buffer) refused valid large events, a Responses `.done` event carrying a
600 KB argument (issue 18), and it re-joins a long line's pieces on every read. A line may
be as long as a request body may be (`max_body_bytes`): memory stays bounded by that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from reflexguard.core import json_text
from reflexguard.core.attempts import read_attempt
from reflexguard.core.choice import returned_attempt
from reflexguard.core.limits import depth_exceeds, nesting_could_exceed
from reflexguard.core.model import JsonObject
from reflexguard.dialects.chat_stream import (
    DONE,
    StreamAssembler,
    closing_chunk_bodies,
    error_event,
    replayable_text_chunk,
    sse,
    text_chunk,
)
from reflexguard.dialects.native_stream import messages_error_event, responses_error_event
from reflexguard.http.call import GuardedCall
from reflexguard.http.context import GuardContext
from reflexguard.http.responses import json_error, upstream_error
from reflexguard.http.stream_clean import clean_first
from reflexguard.http.upstream import AnswerTooLarge, UpstreamFailure

EVENT_STREAM = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# HttpProcessingError: aiohttp's LineTooLong for an SSE line over its 512 KiB limit.
STREAM_FAULTS = (aiohttp.ClientError, asyncio.TimeoutError, HttpProcessingError)
# Held undecided text is replayed as the upstream's own events up to this many bytes; past
# it (a stream of whitespace, say) it is written as one chunk of ours, as before.
MAX_REPLAY_BYTES = 64 * 1024
# The prepared response, for the error middleware.
STREAM_KEY: web.RequestKey[web.StreamResponse] = web.RequestKey("stream", web.StreamResponse)


class ClientGone(Exception):
    """The agent closed its connection while we were writing to it."""


class StreamBroken(Exception):
    """The upstream's stream cannot be read on: its message says why."""


class SseLines:
    """Splits an upstream SSE body into lines (without their end), each up to `max_line`
    bytes, in time linear in the body: a network chunk is split once, in C, and a line cut
    across chunks is gathered in one buffer. Synchronous, so the lines of one chunk cost
    no await each (the read loop's per-event cost, issue 23).

    A line ends in CRLF, LF or a bare CR, as the SSE grammar allows (WHATWG HTML, "Parsing
    an event stream"); a chunk holding no CR costs one `bytes.find` more. A CR that ends a
    chunk ends its line, and an LF opening the next chunk is then the same line end."""

    def __init__(self, max_line: int, max_total: int | None = None) -> None:
        self.max_line = max_line
        # The whole stream's bound (max_answer_bytes): a guarded stream holds its calls'
        # deltas until the choice ends, so an endless one would grow without it.
        self.max_total = max_total
        self.total = 0
        self.pending = bytearray()
        # Set on a line over max_line (StreamBroken) or a stream past max_total
        # (AnswerTooLarge): the lines before it are still handed out, as they were when
        # read one at a time; the caller raises it after them.
        self.fault: StreamBroken | AnswerTooLarge | None = None
        self._after_cr = False  # the last chunk ended in CR: an LF now is its CRLF's

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines `chunk` completes; its unfinished tail is kept for the next."""
        self.total += len(chunk)
        if self.max_total is not None and self.total > self.max_total:
            self.fault = AnswerTooLarge(self.max_total)
            return []
        if self._after_cr:
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if chunk.find(b"\r") >= 0:
            self._after_cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        tail = lines.pop()  # after the last newline: the start of an unfinished line
        if lines and self.pending:
            if len(self.pending) + len(lines[0]) > self.max_line:
                return self._over([])
            self.pending += lines[0]
            lines[0] = bytes(self.pending)
            self.pending.clear()
        for at, line in enumerate(lines):
            if len(line) > self.max_line:
                return self._over(lines[:at])
        if tail:
            if len(self.pending) + len(tail) > self.max_line:
                return self._over(lines)
            self.pending += tail
        return lines

    def _over(self, before: list[bytes]) -> list[bytes]:
        self.fault = StreamBroken(f"upstream stream line exceeds {self.max_line} bytes")
        return before

    def rest(self) -> bytes:
        """What followed the body's last newline (a last line sent without one)."""
        out = bytes(self.pending)
        self.pending.clear()
        return out


async def sse_lines(content: aiohttp.StreamReader, max_line: int,
                    max_total: int | None = None) -> AsyncIterator[bytes]:
    """The lines of an upstream SSE body (without their ends), each up to `max_line`
    bytes, `max_total` in all, in time linear in the body (SseLines)."""
    splitter = SseLines(max_line, max_total)
    async for chunk in content.iter_any():
        for line in splitter.feed(chunk):
            yield line
        if splitter.fault is not None:
            raise splitter.fault
    if rest := splitter.rest():
        yield rest


def chat_error_end(message: str, code: str = "upstream_stream_error") -> bytes:
    """How a started chat stream ends on a failure: an error chunk, then `[DONE]`."""
    return error_event(message, code) + DONE


def stream_error_end(path: str, message: str) -> bytes:
    """The failure that ends a started pass-through stream, in its route's grammar."""
    route = path.partition("?")[0].strip("/")
    if route == "messages":
        return messages_error_event(message)
    if route == "responses":
        return responses_error_event(message)
    return chat_error_end(message)


class ClientStream:
    """The response to the agent, prepared on the first write.

    The headers leave with the first write's bytes, in one send (aiohttp sends a
    StreamResponse's headers on their own by default: one more syscall, and one more
    wake-up of the agent, before its first text byte; issue 23)."""

    def __init__(self, request: web.Request, status: int = 200,
                 headers: dict[str, str] | None = None) -> None:
        self.request = request
        self.response = web.StreamResponse(status=status, headers=headers or EVENT_STREAM)
        # aiohttp's own switch (web.Response sets it so): headers buffered until the
        # first payload write, then written together with it.
        self.response._send_headers_immediately = False

    @property
    def started(self) -> bool:
        return self.response.prepared

    async def write(self, data: bytes) -> None:
        try:
            if not self.response.prepared:
                self.request[STREAM_KEY] = self.response
                await self.response.prepare(self.request)
            await self.response.write(data)
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one too
            raise ClientGone from None

    async def end(self, data: bytes = b"") -> web.StreamResponse:
        """The stream's last bytes and its end, in one write (with the headers when
        nothing was written yet): a held call reaches the agent in one piece."""
        try:
            if not self.response.prepared:
                self.request[STREAM_KEY] = self.response
                await self.response.prepare(self.request)
            await self.response.write_eof(data)
        except ConnectionResetError:
            raise ClientGone from None
        return self.response


async def end_stream_with_error(response: web.StreamResponse, message: str,
                                code: str = "internal",
                                path: str | None = None) -> web.StreamResponse:
    """Close a started stream with an error event, in the grammar of `path`'s route when
    given (chat's otherwise); the connection may already be gone."""
    route = (path or "").removeprefix("/v1/")
    ending = stream_error_end(route, message) if route in ("messages", "responses") \
        else chat_error_end(message, code)
    try:
        await response.write(ending)
        await response.write_eof()
    except ConnectionResetError:
        pass
    return response


async def byte_stream(guard: GuardContext, request: web.Request, raw: bytes,
                      headers: dict[str, str],
                      path: str = "chat/completions") -> web.StreamResponse:
    """A stream reflexguard does not guard: the upstream's bytes, untouched."""
    try:
        async with guard.upstream.stream(path, raw, headers) as upstream:
            out = ClientStream(request, upstream.status, {
                "Content-Type": upstream.headers.get("Content-Type", "text/event-stream"),
                "Cache-Control": "no-cache"})
            tail = b"\n\n"  # the last bytes written: an error event must open its own event
            try:
                try:
                    async for data in upstream.content.iter_any():
                        await out.write(data)
                        tail = (tail + data)[-2:] if len(data) < 2 else data[-2:]
                except STREAM_FAULTS:
                    guard.telemetry.fallback("upstream_stream_cut", path=path)
                    if not out.started:
                        return json_error(502, "upstream stream was cut off",
                                          code="upstream_stream_error")
                    opening = b"" if tail == b"\n\n" else b"\n\n"
                    await out.write(opening + stream_error_end(path, "upstream stream was "
                                                                     "cut off"))
                return await out.end()
            except ClientGone:
                guard.telemetry.client_gone(path=path)
                return out.response
    except UpstreamFailure as exc:
        return upstream_error(exc)


class SseObjects:
    """The JSON objects of an upstream SSE stream, up to `[DONE]`, for every dialect.

    Lines that are not JSON, or not objects, are counted and skipped; an object nested
    deeper than `max_json_depth` raises StreamBroken (nothing later could re-encode it).
    `batches` hands them out one network chunk at a time: the objects that arrived
    together, so the caller can write what they release in one write (issue 23).
    """

    def __init__(self, guard: GuardContext, request_id: str) -> None:
        self.guard = guard
        self.request_id = request_id
        self.done = False

    def _objects(self, lines: list[bytes],
                 out: list[tuple[bytes, JsonObject]]) -> StreamBroken | None:
        """The objects of `lines` appended to `out`; the fault that stops the stream, if one
        does (returned, so the objects before it are still handed out first)."""
        depth = self.guard.settings.max_json_depth
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                return None
            try:
                value = json_text.loads(payload)  # as the agent's decoder reads it
            except ValueError:
                self.guard.telemetry.fallback("unparseable_stream_chunk",
                                              request_id=self.request_id)
                continue
            if not isinstance(value, dict):
                self.guard.telemetry.fallback("non_object_stream_chunk",
                                              request_id=self.request_id)
                continue
            if nesting_could_exceed(payload, depth) and depth_exceeds(value, depth):
                return StreamBroken(f"upstream stream chunk nests deeper than {depth} levels")
            out.append((payload, value))
        return None

    async def batches(self, content: aiohttp.StreamReader,
                      ) -> AsyncIterator[list[tuple[bytes, JsonObject]]]:
        """(payload, object) lists, one per network chunk that completed any."""
        settings = self.guard.settings
        splitter = SseLines(settings.max_body_bytes, settings.max_answer_bytes)
        async for chunk in content.iter_any():
            batch: list[tuple[bytes, JsonObject]] = []
            fault = self._objects(splitter.feed(chunk), batch) or splitter.fault
            if batch:
                yield batch
            if fault is not None:
                raise fault
            if self.done:
                return
        batch = []
        fault = self._objects([splitter.rest()], batch)
        if batch:
            yield batch
        if fault is not None:
            raise fault


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
