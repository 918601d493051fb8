"""Reading an upstream SSE stream, for every dialect: its lines and the JSON objects they
carry, with the faults that stop one. This reads an I/O edge (the upstream's bytes).

Upstream SSE lines are split here (`sse_lines`), not by aiohttp's readline: its line limit
(twice the read buffer) refused valid large events, a Responses `.done` event carrying a
600 KB argument (issue 18), and it re-joins a long line's pieces on every read. A line may
be as long as a request body may be (`max_body_bytes`): memory stays bounded by that.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from reflexguard.core import json_text
from reflexguard.core.limits import depth_exceeds, nesting_could_exceed
from reflexguard.core.model import JsonObject
from reflexguard.http.context import GuardContext
from reflexguard.http.upstream import AnswerTooLarge

# HttpProcessingError: aiohttp's LineTooLong for an SSE line over its 512 KiB limit.
STREAM_FAULTS = (aiohttp.ClientError, asyncio.TimeoutError, HttpProcessingError)


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
