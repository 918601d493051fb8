"""An upstream that misbehaves on purpose, on a real loopback socket (issue 30): answers
that never end, answers that are slow or only keep-alive comments, and SSE streams whose
lines end in a bare CR. Everything it sends is labelled simulated.

`mode` picks the behaviour for the next requests; `stopped` records whether reflexguard
hung up on an endless answer (the proof that it closed the upstream request).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

Mode = Literal["endless_json", "huge_length", "endless_stream", "slow_json", "comments",
               "cr_stream", "echo"]
PIECE = 64 * 1024  # what an endless answer writes per write


def sse(data: dict[str, Any], name: str | None = None, end: str = "\n") -> bytes:
    head = f"event: {name}{end}" if name else ""
    return f"{head}data: {json.dumps(data)}{end}{end}".encode()


def chat_call_start() -> dict[str, Any]:
    return {"id": "chatcmpl-hostile", "object": "chat.completion.chunk", "created": 1,
            "model": "simulated-hostile", "choices": [{"index": 0, "delta": {
                "role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
                                                     "type": "function", "function": {
                                                         "name": "get_order_details",
                                                         "arguments": ""}}]},
                "finish_reason": None}]}


def chat_arguments(text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-hostile", "object": "chat.completion.chunk", "created": 1,
            "model": "simulated-hostile", "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": text}}]}, "finish_reason": None}]}


MESSAGE = {"id": "msg_hostile", "type": "message", "role": "assistant",
           "model": "simulated-hostile", "content": [], "stop_reason": None,
           "usage": {"input_tokens": 1, "output_tokens": 0}}
RESPONSE = {"id": "resp_hostile", "object": "response", "status": "in_progress",
            "model": "simulated-hostile", "output": []}
CALL_ITEM = {"type": "function_call", "id": "fc_1", "call_id": "call_1",
             "name": "get_order_details", "arguments": "", "status": "in_progress"}
# route -> (the events that open a call, the delta repeated forever)
ENDLESS: dict[str, tuple[list[bytes], bytes]] = {
    "completions": ([sse(chat_call_start())], sse(chat_arguments("a" * PIECE))),
    "messages": ([sse({"type": "message_start", "message": MESSAGE}, "message_start"),
                  sse({"type": "content_block_start", "index": 0, "content_block": {
                      "type": "tool_use", "id": "toolu_1", "name": "get_order_details",
                      "input": {}}}, "content_block_start")],
                 sse({"type": "content_block_delta", "index": 0, "delta": {
                     "type": "input_json_delta", "partial_json": "a" * PIECE}},
                     "content_block_delta")),
    "responses": ([sse({"type": "response.created", "sequence_number": 0,
                        "response": RESPONSE}, "response.created"),
                   sse({"type": "response.output_item.added", "sequence_number": 1,
                        "output_index": 0, "item": CALL_ITEM}, "response.output_item.added")],
                  sse({"type": "response.function_call_arguments.delta", "sequence_number": 2,
                       "item_id": "fc_1", "output_index": 0, "delta": "a" * PIECE},
                      "response.function_call_arguments.delta")),
}


@dataclass
class HostileUpstream:
    mode: Mode = "echo"
    # For "cr_stream": the complete events of one stream, written with CR line ends.
    events: list[bytes] = field(default_factory=list)
    delay: float = 0.0  # "slow_json": seconds before the answer
    answer: dict[str, Any] = field(default_factory=dict)  # "slow_json"/"echo"'s answer
    stopped: int = 0  # endless answers reflexguard hung up on
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        if self.mode == "echo" or self.mode == "slow_json":
            await asyncio.sleep(self.delay)
            return web.json_response(self.answer)
        if self.mode == "huge_length":
            response = web.StreamResponse(headers={"Content-Type": "application/json",
                                                   "Content-Length": str(10 ** 12)})
            await response.prepare(request)
            return await self._endless(response, b" ")
        if self.mode == "endless_json":
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await response.write(b'{"id": "simulated-hostile", "choices": [{"message": '
                                 b'{"role": "assistant", "content": "')
            return await self._endless(response, b"loop " * (PIECE // 5))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if self.mode == "comments":
            return await self._endless(response, b": keep-alive\n\n", pause=0.2)
        if self.mode == "cr_stream":
            for piece in self.events:
                await response.write(piece)
            await response.write_eof()
            return response
        # endless_stream: a call opened and never closed, in the route's own grammar.
        route = request.path.rstrip("/").rsplit("/", 1)[-1]
        opening, delta = ENDLESS[route] if route in ENDLESS else ENDLESS["completions"]
        await response.write(b"".join(opening))
        return await self._endless(response, delta)

    async def _endless(self, response: web.StreamResponse, piece: bytes,
                       pause: float = 0.0) -> web.StreamResponse:
        try:
            while True:
                await response.write(piece)
                await asyncio.sleep(pause)
        except (ConnectionResetError, asyncio.CancelledError):
            self.stopped += 1  # the reader went away: what a bounded reader must do
            raise

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app
