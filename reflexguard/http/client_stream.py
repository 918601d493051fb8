"""Writing a stream to the agent, for every route: the response prepared on its first
write, a client disconnect read there, and the error event that ends a started stream in
its route's grammar. This is an I/O edge.

Headers go out with the first byte worth sending, not before: a stream that fails or
carries nothing usable before that still gets a proper JSON error status. Once headers
are out, every failure becomes an error event and a clean end, never a second response.
Writes to the client are the only place a client disconnect is read: `ClientGone` is
not an aiohttp `ClientError`, so it can never be mistaken for an upstream fault.
"""

from __future__ import annotations

from aiohttp import web

from reflexguard.dialects.chat_stream import DONE, error_event
from reflexguard.dialects.native_stream import messages_error_event, responses_error_event

EVENT_STREAM = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


# The prepared response, for the error middleware.
STREAM_KEY: web.RequestKey[web.StreamResponse] = web.RequestKey("stream", web.StreamResponse)


class ClientGone(Exception):
    """The agent closed its connection while we were writing to it."""


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
