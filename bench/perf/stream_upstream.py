"""The streaming benchmark's fake upstream (simulated): SSE answers in each dialect, cut as
servers cut them, each event its own write, and the instant of each stream's last byte.

`python -m bench.perf.stream_upstream --port P`. The request's text carries a `rgbench-ID`
tag (in the user's message, which every proxy forwards as sent) and its `model` names the
scene: `text` (2 KB of plain text in 8-character deltas), `code` (the same text inside a
code fence: reflexguard holds it), `call` (one valid `write_file` call of ~2 KB arguments in
16-character deltas). After writing a stream's last byte the upstream notes the instant
(CLOCK_MONOTONIC, which every process of the machine shares); `GET /stamps` hands out and
forgets the instants noted so far, so the client reads the hold as its own last byte minus
the upstream's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.perf.stream_bounds import _responses, _sse, text_events

ROUTES = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
          "responses": "/v1/responses"}
SCENES = ("text", "code", "call")
TEXT_PIECE = "the quick brown fox. "  # 21 characters, cut into 8-character deltas
TEXT = (TEXT_PIECE * 98)[:2048]
DELTA = 8
ARG_DELTA = 16
CALL_ARGUMENTS = json.dumps({"path": "notes.md", "content": "line of notes\n" * 143})
TAG = re.compile(rb"rgbench-([0-9]+)")
TOOL = {"name": "write_file", "description": "Write a file.",
        "parameters": {"type": "object", "required": ["path", "content"],
                       "properties": {"path": {"type": "string"},
                                      "content": {"type": "string"}}}}


def deltas(text: str, size: int) -> list[str]:
    return [text[at:at + size] for at in range(0, len(text), size)]


def split_events(stream: bytes) -> list[bytes]:
    """The stream cut at its SSE event boundaries, each event with its blank line."""
    return [event + b"\n\n" for event in stream.split(b"\n\n") if event]


def call_events(dialect: str, arguments: str) -> bytes:
    """One call whose arguments arrive in ARG_DELTA-character deltas, as `dialect` streams it."""
    pieces = deltas(arguments, ARG_DELTA)
    if dialect == "chat":
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 1,
                "model": "simulated"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return _sse(None, {**base, "choices": [{"index": 0, "delta": delta,
                                                    "finish_reason": finish}]})
        head = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": TOOL["name"], "arguments": ""}}
        events = [chunk({"role": "assistant", "content": None}), chunk({"tool_calls": [head]})]
        events += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
                   for p in pieces]
        return b"".join([*events, chunk({}, "tool_calls"), b"data: [DONE]\n\n"])
    if dialect == "messages":
        start: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant",
                                 "model": "simulated", "content": [], "stop_reason": None,
                                 "usage": {"input_tokens": 5, "output_tokens": 1}}
        block = {"type": "tool_use", "id": "toolu_1", "name": TOOL["name"], "input": {}}
        events = [_sse("message_start", {"type": "message_start", "message": start}),
                  _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": block})]
        events += [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "input_json_delta",
                                                          "partial_json": p}}) for p in pieces]
        events += [_sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
                   _sse("message_delta", {"type": "message_delta",
                                          "delta": {"stop_reason": "tool_use"},
                                          "usage": {"output_tokens": len(pieces)}}),
                   _sse("message_stop", {"type": "message_stop"})]
        return b"".join(events)
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": TOOL["name"],
            "arguments": arguments, "status": "completed"}
    return b"".join(_responses([
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "arguments": "", "status": "in_progress"}},
        *({"type": "response.function_call_arguments.delta", "item_id": "fc_1",
           "output_index": 0, "delta": p} for p in pieces),
        {"type": "response.function_call_arguments.done", "item_id": "fc_1",
         "output_index": 0, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": 0, "item": item}], [item]))


def rendered() -> dict[tuple[str, str], list[bytes]]:
    """(scene, dialect) -> the stream's events."""
    out = {}
    for dialect in ROUTES:
        out["text", dialect] = split_events(text_events(dialect, deltas(TEXT, DELTA)))
        out["code", dialect] = split_events(text_events(
            dialect, ["```python\n", *deltas(TEXT, DELTA), "\n```\n"]))
        out["call", dialect] = split_events(call_events(dialect, CALL_ARGUMENTS))
    return out


def serve(port: int, gap_ms: float, stamps_dir: Path | None = None,
          reuse_port: bool = False) -> None:
    """One upstream process. With `stamps_dir` (several processes on one port, the capacity
    benchmark) each stream's last instant is appended to this process's own file there
    instead of being kept for `GET /stamps`."""
    streams = rendered()
    stamps: dict[str, int] = {}
    stamp_file = (stamps_dir / f"{os.getpid()}.txt").open("a", buffering=1) \
        if stamps_dir else None

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        dialect = next(d for d, path in ROUTES.items() if request.path == path)
        scene = json.loads(raw).get("model")
        tag = TAG.search(raw)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events = streams[scene, dialect]
        for n, event in enumerate(events):
            await response.write(event)
            if gap_ms > 0 and n < len(events) - 1:
                # Between events only: after the last one the end follows at once, before a
                # proxy that stops at `[DONE]` can close the connection (the stamp would be
                # lost with the write_eof that fails then).
                await asyncio.sleep(gap_ms / 1000)
            elif n % 8 == 7:  # let other streams interleave, as a batching server does
                await asyncio.sleep(0)
        await response.write_eof()
        if tag:
            if stamp_file is not None:  # a line each: the reader never sees half of one
                stamp_file.write(f"{tag.group(1).decode()} {time.monotonic_ns()}\n")
            else:
                stamps[tag.group(1).decode()] = time.monotonic_ns()
        return response

    async def handout(_: web.Request) -> web.Response:
        out = dict(stamps)
        stamps.clear()
        return web.json_response(out)

    app = web.Application()
    app.router.add_get("/stamps", handout)
    app.router.add_post("/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, backlog=4096,
                reuse_port=reuse_port)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="a pause between events (0: none, a yield every 8 events)")
    parser.add_argument("--processes", type=int, default=1,
                        help="SO_REUSEPORT processes on the port (then --stamps-dir)")
    parser.add_argument("--stamps-dir", type=Path, default=None,
                        help="each process appends `TAG NS` lines to its own file here")
    args = parser.parse_args()
    # Forked before any event loop exists; stopping the group stops them all.
    for _ in range(args.processes - 1):
        multiprocessing.get_context("fork").Process(
            target=serve, args=(args.port, args.gap_ms, args.stamps_dir, True)).start()
    serve(args.port, args.gap_ms, args.stamps_dir, args.processes > 1)
