"""A scriptable fake OpenAI-compatible upstream on loopback, for tests and benchmarks.

It is labelled as what it is: every completion it returns has `model` set to the
requested model (or "fake-upstream") and `system_fingerprint: "simulated"`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.perf.chunks import stream_chunks

Completion = dict[str, Any]


def tool_call_completion(name: str, arguments: str | dict[str, Any], content: str | None = None,
                         call_id: str = "call_1", usage: int = 10) -> Completion:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return completion_with_message(
        {"role": "assistant", "content": content, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]},
        "tool_calls", usage,
    )


def text_completion(content: str | None, usage: int = 10) -> Completion:
    return completion_with_message({"role": "assistant", "content": content}, "stop", usage)


def completion_with_message(message: dict[str, Any], finish: str, usage: int = 10) -> Completion:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000,
        "model": "fake-upstream", "system_fingerprint": "simulated",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage, "completion_tokens": usage, "total_tokens": 2 * usage},
    }


@dataclass
class Scripted:
    """What the fake answers next. A status other than 200 sends `body` as an error."""

    completion: Completion | None = None
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    cut_stream_after: int | None = None  # chunks to send before dropping the connection


@dataclass
class FakeUpstream:
    script: list[Scripted] = field(default_factory=list)
    default: Scripted | Callable[[dict[str, Any]], Scripted] | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def next(self, body: dict[str, Any]) -> Scripted:
        if self.script:
            return self.script.pop(0)
        if callable(self.default):
            return self.default(body)
        if self.default is not None:
            return self.default
        return Scripted(completion=text_completion("no script left"))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        self.paths.append(request.path_qs)
        step = self.next(body)
        if step.delay:
            await asyncio.sleep(step.delay)
        if step.status != 200:
            return web.Response(status=step.status, body=step.body,
                                content_type="application/json")
        completion = step.completion or text_completion("")
        if body.get("stream") and request.path in ("/v1/messages", "/v1/responses"):
            return await _native_stream(request, completion)
        if body.get("stream"):
            return await _stream(request, completion, step.cut_stream_after,
                                 bool((body.get("stream_options") or {}).get("include_usage")))
        return web.json_response(completion)

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": "fake-upstream", "object": "model", "owned_by": "simulated"}]})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.chat)
        # Native dialects: the script then holds a Messages or Responses reply as is.
        app.router.add_post("/v1/messages", self.chat)
        app.router.add_post("/v1/responses", self.chat)
        app.router.add_get("/v1/models", self.models)
        return app


async def _stream(request: web.Request, completion: Completion, cut_after: int | None,
                  include_usage: bool) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for sent, chunk in enumerate(stream_chunks(completion, include_usage)):
        if cut_after is not None and sent >= cut_after:
            assert request.transport is not None
            request.transport.close()  # drop the connection mid-stream
            return response
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _native_stream(request: web.Request, reply: Completion) -> web.StreamResponse:
    from tests.fakes.native_replies import anthropic_stream, responses_stream

    events = anthropic_stream(reply) if request.path == "/v1/messages" else \
        responses_stream(reply)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for data in events:
        await response.write(data)
    await response.write_eof()
    return response
