"""In front of the model server: its generation limit, and one compatibility repair.

A pass-through that sets `max_tokens` on a chat request that has none, and sends an
assistant message's `content: null` as `""`.

BFCL's handler sends no `max_tokens`, and llama-cpp-python's server then generates to the
end of its context: a greedy 0.5B model that loops on one call would hold the bench for
minutes per case. A serving limit is what a production server has (vLLM's
`--max-model-len`, a gateway's default); it is applied below reflexguard, identically in
both arms, so it is part of the cell, not of the guard. A request that names its own limit
(reflexguard's bounded re-asks) is forwarded unchanged.

`content: null` beside `tool_calls` is what the OpenAI SDK (and so BFCL's handler) sends
back as history on every multi-turn step; llama-cpp-python's server refuses it with a 500
(`Input should be a valid string`; vLLM accepts it), which would make every multi-turn
case an inference error at its second request. That is a defect of this model server,
not of the model or the guard, so it is repaired here, below reflexguard, in both arms.
Hosted in a thread like ProxyHost. With an `AnswerBook` it also serves a request it has
answered before from the book (bench/bfcl/shared_answers.py says when that is allowed).
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

import aiohttp
import orjson
from aiohttp import web

from bench.bfcl.shared_answers import Answer, AnswerBook
from reflexguard.ops.loopback import free_port

LENGTH_FIELDS = ("max_tokens", "max_completion_tokens")
UPSTREAM_TIMEOUT_S = 900.0


def capped(body: bytes, limit: int) -> bytes:
    """The request with `max_tokens: limit` when it sets no length limit of its own, and
    `""` for an assistant message's null content; the same bytes when neither applies."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body  # the server answers a bad body itself
    if not isinstance(parsed, dict):
        return body
    changed = dict(parsed)
    if not any(parsed.get(f) is not None for f in LENGTH_FIELDS):
        changed["max_tokens"] = limit
    messages = parsed.get("messages")
    if isinstance(messages, list) and any(_null_assistant(m) for m in messages):
        changed["messages"] = [{**m, "content": ""} if _null_assistant(m) else m
                               for m in messages]
    return body if changed == parsed else orjson.dumps(changed)


def _streamed(body: bytes) -> bool:
    """A streamed answer is relayed as it comes, never kept (BFCL's handler does not stream)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return True
    return not isinstance(parsed, dict) or bool(parsed.get("stream"))


def _null_assistant(message: object) -> bool:
    return (isinstance(message, dict) and message.get("role") == "assistant"
            and "content" in message and message["content"] is None)


class CapHost:
    """`with CapHost(target, limit) as url:` serves the capped pass-through on loopback."""

    def __init__(self, target: str, limit: int, book: AnswerBook | None = None) -> None:
        self.target = target.rstrip("/")
        self.limit = limit
        self.book = book
        self.port = free_port()
        self.capped_requests = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bfcl-cap", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the caller in __enter__
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def forward(request: web.Request) -> web.Response:
                body = await request.read()
                tail = request.match_info["tail"]
                if request.method == "POST" and tail == "chat/completions":
                    sent = capped(body, self.limit)
                    self.capped_requests += sent is not body
                    body = sent
                headers = {k: v for k, v in request.headers.items()
                           if k.lower() in ("content-type", "authorization")}

                async def ask() -> Answer:
                    try:
                        async with session.request(request.method, f"{self.target}/{tail}",
                                                   data=body or None,
                                                   headers=headers) as answer:
                            return Answer(answer.status, answer.content_type,
                                          await answer.read())
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        # The model server stopped (the bench is shutting down) or hung:
                        # reflexguard reports an upstream failure, as for any server.
                        return Answer(502, "application/json", orjson.dumps({"error": {
                            "message": f"model server: {type(exc).__name__}",
                            "type": "upstream_error"}}))

                book = self.book
                if (book is not None and request.method == "POST"
                        and tail == "chat/completions" and not _streamed(body)):
                    got = await book.answer(body, ask)
                else:
                    got = await ask()
                return web.Response(status=got.status, body=got.body,
                                    content_type=got.content_type)

            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/v1/{tail:.*}", forward)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()

    def __enter__(self) -> str:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError(f"the generation cap did not start: {self._error}")
        return f"http://127.0.0.1:{self.port}/v1"

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
