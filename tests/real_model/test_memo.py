"""The memo the real-model runs share (memo.py), against the fake upstream: no model runs.

It answers a body again only with what the upstream said to that same body, and observe
mode's requests are exactly the repair run's first attempts, which is what lets the
observe-mode run skip a second decode (test_embedded_guarantees.py).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import orjson
from aiohttp.test_utils import TestServer

from bench.figures.embedded_run import run_prompts
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion
from tests.real_model.memo import Memo

ASK = {"model": "m", "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}


async def post(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, bytes]:
    async with session.post(f"{url}/chat/completions", data=body,
                            headers={"Content-Type": "application/json"}) as answer:
        return answer.status, await answer.read()


async def test_only_the_same_body_is_answered_again(
        fake: tuple[FakeUpstream, TestServer]) -> None:
    upstream, server = fake
    memo = Memo(str(server.make_url("/v1")))
    front = await memo.serve()
    url = str(front.make_url("/v1"))
    reordered = {"messages": ASK["messages"], "temperature": 0, "model": "m"}
    other = {**ASK, "messages": [{"role": "user", "content": "hello"}]}
    try:
        async with aiohttp.ClientSession() as session:
            first = await post(session, url, orjson.dumps(ASK))
            assert await post(session, url, orjson.dumps(reordered)) == first
            assert upstream.calls == 1
            await post(session, url, orjson.dumps(other))
            await post(session, url, orjson.dumps({**ASK, "stream": True}))
            await post(session, url, orjson.dumps({**ASK, "stream": True}))
            assert upstream.calls == 4  # a new body and both streams reached the upstream
            upstream.script = [Scripted(status=503, body=b'{"error": "busy"}')]
            failed = {**ASK, "max_tokens": 5}
            assert (await post(session, url, orjson.dumps(failed)))[0] == 503
            assert (await post(session, url, orjson.dumps(failed)))[0] == 200
            assert upstream.calls == 6  # a failure is never answered again
    finally:
        await front.close()
    assert (memo.decoded, memo.replayed) == (4, 1)


async def test_observe_mode_sends_the_repair_runs_first_attempts(
        fake: tuple[FakeUpstream, TestServer], tmp_path: Path) -> None:
    upstream, server = fake
    # A call of a tool that does not exist: every prompt is re-asked to the bound.
    upstream.default = Scripted(completion=tool_call_completion("no_such_tool", {}))
    memo = Memo(str(server.make_url("/v1")))
    front = await memo.serve()
    repaired = await run_prompts(str(front.make_url("/v1")), tmp_path / "repair.jsonl",
                                 max_repairs=2, constrained_retry="response_format")
    await front.close()
    assert all(result.attempts == 3 for result in repaired.results)
    assert memo.decoded == upstream.calls == 3 * 34
    front = await memo.serve()
    observed = await run_prompts(str(front.make_url("/v1")), tmp_path / "observe.jsonl",
                                 repair=False)
    await front.close()
    assert (memo.decoded, memo.replayed) == (0, 34)
    for seen, first in zip(observed.results, repaired.results, strict=True):
        assert seen.exchanges[0].request == first.exchanges[0].request
