"""A memo in front of a real model server: each distinct chat-completions body is decoded
by the model once per test session, and a later identical body gets the model's own answer
to it again (status, content type, bytes), without a second decode.

Why it is sound: the prompts run at temperature 0, so the model's answer is a function of
the body; the memo only ever returns what the real model said to that exact body in this
session, and a body it has not seen goes to the model. Why it exists: the observe-mode run
sends each prompt exactly as the repair run's first attempt did, and on 2 cores the second
decode of those 34 prompts was a minute of the suite (issue 23).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp
import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

Answer = tuple[int, str, bytes]  # status, content type, body


def memo_key(path: str, body: bytes) -> bytes | None:
    """The body as JSON with sorted keys (two encodings of one request share a key); None
    for what is never kept: anything but a non-streamed chat completion."""
    if path != "chat/completions":
        return None
    parsed = orjson.loads(body)
    if not isinstance(parsed, dict) or parsed.get("stream"):
        return None
    return orjson.dumps(parsed, option=orjson.OPT_SORT_KEYS)


@dataclass
class Memo:
    target: str  # the model server's base URL, ending in /v1
    answers: dict[bytes, Answer] = field(default_factory=dict)  # kept across runs
    decoded: int = 0  # bodies the model answered during the current serve()
    replayed: int = 0  # bodies answered from `answers`

    async def forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        path = request.match_info["tail"]
        key = memo_key(path, body) if request.method == "POST" else None
        if key is not None and key in self.answers:
            self.replayed += 1
            status, content_type, payload = self.answers[key]
            return web.Response(status=status, body=payload, content_type=content_type)
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.request(
                request.method, f"{self.target}/{path}", data=body or None,
                headers={"Content-Type": "application/json"}) as answer:
            payload = await answer.read()
            if key is not None:
                self.decoded += 1
                if answer.status == 200:  # a failure is never replayed
                    self.answers[key] = (answer.status, answer.content_type, payload)
            return web.Response(status=answer.status, body=payload,
                                content_type=answer.content_type)

    async def serve(self) -> TestServer:
        """A loopback server for this memo (started; the caller closes it)."""
        self.decoded = self.replayed = 0
        app = web.Application()
        app.router.add_route("*", "/v1/{tail:.*}", self.forward)
        server = TestServer(app)
        await server.start_server()
        return server
