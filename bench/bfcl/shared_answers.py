"""The model server's answers, kept per cell so that both arms share the first attempt.

Decoding is greedy and each cell has one model server, so a request whose bytes are
identical gets the same answer (issue 20 allows sharing once a sample of at least 50 cases
from independent runs shows it; `sharing_allowed` checks that on the stored records). The
off arm's requests are answered by the model and kept; the on arm's first attempt is the
same request, byte for byte, and is answered from the book; its re-asks are new requests and
go to the model. Keyed by the exact request body as the model server would receive it, so a
request that differs in any byte is never served a stored answer.

`AnswerBook` does file I/O (one JSON line per answer, appended, so an interrupted run keeps
what it had); `sharing_allowed` is plain.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.stats.bfcl import untouched_agreement
from bench.stats.bfcl_records import CaseRecord

MIN_INDEPENDENT_CASES = 50  # issue 20: "a sample of at least 50 cases"


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


def request_key(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class AnswerBook:
    """Answers by request key, persisted to `path`; identical requests in flight at once
    wait for the first one's answer instead of asking the model twice."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hits = 0
        self.misses = 0
        self._answers: dict[str, Answer] = {}
        self._in_flight: dict[str, asyncio.Future[Answer]] = {}
        self._lock = threading.Lock()
        if path.exists():
            for line in path.read_bytes().splitlines():
                try:
                    row = orjson.loads(line)
                    self._answers[row["key"]] = Answer(row["status"], row["content_type"],
                                                       base64.b64decode(row["body"]))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue  # a line cut off by an interrupted run: asked again

    @property
    def kept(self) -> int:  # not __len__: an empty book must still be truthy
        return len(self._answers)

    async def answer(self, body: bytes, ask: Callable[[], Awaitable[Answer]]) -> Answer:
        key = request_key(body)
        kept = self._answers.get(key)
        if kept is not None:
            self.hits += 1
            return kept
        pending = self._in_flight.get(key)
        if pending is not None:
            self.hits += 1
            return await asyncio.shield(pending)
        self.misses += 1
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            fresh = await ask()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a waiter sees it, nobody else must
            raise
        finally:
            self._in_flight.pop(key, None)
        future.set_result(fresh)
        if fresh.status == 200:  # an error is asked again next time, never replayed
            self._keep(key, fresh)
        return fresh

    def _keep(self, key: str, answer: Answer) -> None:
        self._answers[key] = answer
        line = orjson.dumps({"key": key, "status": answer.status,
                             "content_type": answer.content_type,
                             "body": base64.b64encode(answer.body).decode()})
        with self._lock, self.path.open("ab") as handle:
            handle.write(line + b"\n")


@dataclass(frozen=True)
class SharingVerdict:
    allowed: bool
    identical: int
    compared: int

    def describe(self) -> str:
        return (f"{self.identical}/{self.compared} untouched cases answered identically by "
                f"independent off and on runs (at least {MIN_INDEPENDENT_CASES}, all "
                "identical, are needed to share)")


def sharing_allowed(records: Sequence[CaseRecord], cell: str) -> SharingVerdict:
    """Whether this cell's stored records, from arms that were run independently, show
    byte-identical first answers on at least 50 cases and no difference at all."""
    independent = [r for r in records if r.cell == cell and not r.first_answers_shared]
    rate = untouched_agreement([r for r in independent if r.arm == "off"],
                               [r for r in independent if r.arm == "on"])
    return SharingVerdict(rate.n >= MIN_INDEPENDENT_CASES and rate.successes == rate.n,
                          rate.successes, rate.n)
