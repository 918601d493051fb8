"""The SDKs' raw-response paths (`with_raw_response`, `with_streaming_response`), guarded.

An I/O edge (the SDK does the I/O). Frameworks read the HTTP response around the answer:
langchain-openai calls `with_raw_response.create(...)` and reads `.headers` and
`.parse()`; the Agents SDK streams Responses through `with_streaming_response.create(...)`
and reads `.parse()` and `.request_id`. The caller's request goes out through that same
raw path, so the SDK's response object (status, headers, request id, retries) is the one
handed back; its `.parse()` is the guarded answer. Re-asks go through the plain `create`.
What cannot be guarded -- the raw body (`read()`, `text`, `iter_bytes()`, ...), or
`parse(to=...)` into another type -- is the upstream's first answer: counted and logged
at WARNING when the caller reaches for it.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from reflexguard.api.engine import Guard

# The raw body under the parsed answer: the upstream's own bytes, never the guarded answer.
RAW_BODY = frozenset({"read", "aread", "text", "atext", "json", "ajson", "content",
                      "iter_bytes", "iter_text", "iter_lines", "iter_raw", "iter_content"})


class FirstRaw:
    """The caller's request sent through the raw path: keeps the SDK's response object
    and gives the guard its parsed body (`parse()` is sync on the legacy response)."""

    def __init__(self, send: Any) -> None:
        self._send = send
        self.raw: Any = None
        self.parsed: Any = None

    def __call__(self, body: Any) -> Any:
        self.raw = self._send(body)
        self.parsed = self.raw.parse()
        return self.parsed

    def answer(self, guard: Guard, out: Any) -> Any:
        """The SDK's raw response as it came, or with the guarded answer as its body."""
        return self.raw if out is self.parsed else GuardedRawResponse(self.raw, out, guard)


class AsyncFirstRaw(FirstRaw):
    async def __call__(self, body: Any) -> Any:
        self.raw = await self._send(body)
        self.parsed = self.raw.parse()
        return self.parsed


class GuardedRawResponse:
    """The SDK's raw response, every attribute its own, whose `parse()` is the guarded
    answer (headers, status and request id are the first answer's, as they came)."""

    def __init__(self, raw: Any, answer: Any, guard: Guard, awaited: bool = False) -> None:
        self._raw = raw
        self._answer = answer
        self._guard = guard
        self._awaited = awaited  # AsyncAPIResponse.parse is a coroutine

    def parse(self, *, to: Any = None) -> Any:
        if to is not None:
            self._guard.telemetry.warning_fallback("raw_response_not_guarded",
                                                   reason=f"parse(to={to!r})")
            return self._raw.parse(to=to)
        if self._awaited:
            return _ready(self._answer)
        return self._answer

    def __getattr__(self, name: str) -> Any:
        if name in RAW_BODY:
            self._guard.telemetry.warning_fallback("raw_response_not_guarded",
                                                   reason=f"raw body read ({name})")
        return getattr(self._raw, name)


async def _ready(value: Any) -> Any:
    return value


class GuardedStreamingContext:
    """`with_streaming_response.create(...)`: entering it sends the request through the
    SDK's streaming-response path and guards the answer; leaving it closes the response."""

    def __init__(self, manager: Any, guarded: Any, guard: Guard) -> None:
        self._manager = manager  # the SDK's own context manager, not yet entered
        self._guarded = guarded  # parsed first answer -> the guarded answer (sync)
        self._guard = guard

    def __enter__(self) -> Any:
        response = self._manager.__enter__()
        try:
            parsed = response.parse()
            out = self._guarded(parsed)
        except BaseException as exc:
            self._manager.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return response if out is parsed else GuardedRawResponse(response, out, self._guard)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._manager.__exit__(kind, error, trace)


class AsyncGuardedStreamingContext(GuardedStreamingContext):
    async def __aenter__(self) -> Any:
        response = await self._manager.__aenter__()
        try:
            parsed = await response.parse()
            out = await self._guarded(parsed)
        except BaseException as exc:
            await self._manager.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        if out is parsed:
            return response
        return GuardedRawResponse(response, out, self._guard, awaited=True)

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self._manager.__aexit__(kind, error, trace)
