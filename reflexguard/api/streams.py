"""Guarded streams as the SDKs hand them out: iterable, closable, usable in `with`.

An I/O edge only through the iterator it wraps.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from types import TracebackType
from typing import Any


class GuardedStream:
    """A guarded sync stream of the client's chunk objects (`for`, `with`, `close()`)."""

    def __init__(self, chunks: Generator[Any, None, None]) -> None:
        self._chunks = chunks

    def __iter__(self) -> GuardedStream:
        return self

    def __next__(self) -> Any:
        return next(self._chunks)

    def close(self) -> None:
        self._chunks.close()

    def __enter__(self) -> GuardedStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


class AsyncGuardedStream:
    """A guarded async stream of the client's chunk objects (`async for`, `async with`)."""

    def __init__(self, chunks: AsyncGenerator[Any, None]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> AsyncGuardedStream:
        return self

    async def __anext__(self) -> Any:
        return await self._chunks.__anext__()

    async def close(self) -> None:
        await self._chunks.aclose()

    async def __aenter__(self) -> AsyncGuardedStream:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.close()
