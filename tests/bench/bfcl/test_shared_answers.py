"""Sharing the first attempt between the arms: only identical requests, only when allowed.

The book (bench/bfcl/shared_answers.py) sits in the generation cap in front of the model
server; these tests drive the real CapHost over loopback against a counting fake server.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from aiohttp import web

from bench.bfcl.cap import CapHost
from bench.bfcl.shared_answers import MIN_INDEPENDENT_CASES, AnswerBook, sharing_allowed
from bench.stats.bfcl_records import CaseRecord
from reflexguard.ops.loopback import free_port


class CountingServer:
    """A model server stand-in in a thread: answers with a counter, so that a replayed
    answer is told apart from a fresh one; `fail` makes it answer 500."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []
        self.fail = False
        self.port = free_port()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()

        async def answer(request: web.Request) -> web.Response:
            self.asked.append(orjson.loads(await request.read()))
            if self.fail:
                return web.json_response({"error": {"message": "busy"}}, status=500)
            await asyncio.sleep(0.05)  # long enough for a second identical request to arrive
            return web.json_response({"n": len(self.asked)})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> str:
        self._thread.start()
        self._ready.wait(10)
        return f"http://127.0.0.1:{self.port}/v1"

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[CountingServer, str, AnswerBook]]:
    server = CountingServer()
    book = AnswerBook(tmp_path / "book.jsonl")
    with server as target, CapHost(target, 64, book) as url:
        yield server, url, book


def ask(url: str, content: str, **extra: Any) -> requests.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], **extra}
    return requests.post(f"{url}/chat/completions", json=body, timeout=10)


def test_an_identical_request_is_answered_once(served: tuple[CountingServer, str,
                                                             AnswerBook]) -> None:
    server, url, book = served
    first, second = ask(url, "hello"), ask(url, "hello")
    assert first.json() == second.json() == {"n": 1}
    assert len(server.asked) == 1 and (book.hits, book.misses) == (1, 1)


def test_a_request_that_differs_in_any_byte_asks_the_model(
        served: tuple[CountingServer, str, AnswerBook]) -> None:
    _, url, book = served
    assert ask(url, "hello").json() == {"n": 1}
    assert ask(url, "hello ").json() == {"n": 2}  # a re-ask is a new request
    assert ask(url, "hello", temperature=0).json() == {"n": 3}
    assert book.hits == 0


def test_identical_requests_in_flight_ask_the_model_once(
        served: tuple[CountingServer, str, AnswerBook]) -> None:
    server, url, _ = served
    answers: list[Any] = []
    threads = [threading.Thread(target=lambda: answers.append(ask(url, "same").json()))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert answers == [{"n": 1}] * 3 and len(server.asked) == 1


def test_an_error_is_never_replayed(served: tuple[CountingServer, str, AnswerBook]) -> None:
    server, url, _ = served
    server.fail = True
    assert ask(url, "hello").status_code == 500
    server.fail = False
    assert ask(url, "hello").json() == {"n": 2}


def test_a_streamed_request_is_never_kept(served: tuple[CountingServer, str,
                                                        AnswerBook]) -> None:
    server, url, book = served
    ask(url, "hello", stream=True)
    ask(url, "hello", stream=True)
    assert len(server.asked) == 2 and book.kept == 0


def test_the_book_outlives_the_run_and_skips_a_cut_off_line(tmp_path: Path) -> None:
    path = tmp_path / "book.jsonl"
    server = CountingServer()
    with server as target:
        with CapHost(target, 64, AnswerBook(path)) as url:
            ask(url, "hello")
        with path.open("ab") as handle:
            handle.write(b'{"key": "abc", "stat')  # an interrupted write
        again = AnswerBook(path)
        with CapHost(target, 64, again) as url:
            assert ask(url, "hello").json() == {"n": 1}
    assert again.kept == 1 and again.hits == 1 and len(server.asked) == 1


def record(case: int, arm: str, result: Any, shared: bool = False) -> CaseRecord:
    return CaseRecord(model="m", family="f", precision="Q4_K_M (as shipped)", reference=True,
                      arm=arm, category="simple_python", case_id=f"simple_python_{case}",
                      correct=True, result=result, outcomes={"clean": 1},
                      first_answers_shared=shared)


def pairs(n: int, differing: int = 0, shared: bool = False) -> list[CaseRecord]:
    out = [record(i, "off", [i]) for i in range(n)]
    out += [record(i, "on", [i] if i >= differing else ["other"], shared) for i in range(n)]
    return out


def test_sharing_needs_fifty_independent_identical_cases() -> None:
    assert sharing_allowed(pairs(MIN_INDEPENDENT_CASES), "m@Q4_K_M").allowed
    assert not sharing_allowed(pairs(MIN_INDEPENDENT_CASES - 1), "m@Q4_K_M").allowed


def test_one_difference_refuses_sharing() -> None:
    verdict = sharing_allowed(pairs(80, differing=1), "m@Q4_K_M")
    assert not verdict.allowed and (verdict.identical, verdict.compared) == (79, 80)


def test_shared_arms_are_no_evidence() -> None:
    verdict = sharing_allowed(pairs(80, shared=True), "m@Q4_K_M")
    assert not verdict.allowed and verdict.compared == 0


def test_another_cells_evidence_does_not_count() -> None:
    assert not sharing_allowed(pairs(80), "m@Q2_K").allowed
