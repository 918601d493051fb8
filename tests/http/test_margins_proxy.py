"""`margins: on` through the real HTTP app, a fake upstream replaying logprob payloads."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.perf.chunks import stream_chunks
from reflexguard.core.margins import completion_margins
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.vllm_logprobs import CANCEL_NAME_MARGIN, GET_ORDER_NAME_MARGIN, native_two_calls

RECORDED = json.loads((Path(__file__).parents[1] / "core/fixtures/qwen05b_q4km_logprobs.json")
                      .read_text(encoding="utf-8"))
OPEN = {"type": "object", "properties": {}}
TOOLS = [{"type": "function", "function": {"name": name, "parameters": OPEN}}
         for name in ("get_order_details", "cancel_pending_order")]


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "tools": TOOLS, **extra,
            "messages": [{"role": "user", "content": "Cancel order #W123."}]}


def attempts(events: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    return [e for e in lines if e["event"] == "attempt"]


def metric(text: str, prefix: str) -> float:
    found = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(found) == 1, found
    return float(found[0].rsplit(" ", 1)[1])


async def test_recorded_content_call_gets_margins_and_the_agent_no_logprobs(fake, proxy, tmp_path):
    upstream, _ = fake
    recorded = RECORDED["completions"]["call"]
    upstream.script = [Scripted(recorded)]
    client = await proxy(margins=True, tool_call_format="content")
    sent = body()
    response = await client.post("/v1/chat/completions", json=sent)
    answer = await response.json()
    assert response.status == 200
    assert upstream.requests[0]["logprobs"] is True and upstream.requests[0]["top_logprobs"] == 5
    assert "logprobs" not in sent  # the caller's body untouched
    assert "logprobs" not in answer["choices"][0]
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "cancel_pending_order"
    [expected] = completion_margins(recorded)
    [call] = attempts(tmp_path / "events.jsonl")[0]["calls"]
    assert call["name_margin"] == pytest.approx(expected.name_margin)
    assert call["call_margin"] == pytest.approx(expected.call_margin)
    assert "thin_margin" not in call  # 7.1 nats: far above the threshold
    metrics = (await (await client.get("/metrics")).read()).decode()
    assert metric(metrics, 'reflexguard_tool_name_margin_count{model="m"}') == 1


async def test_native_calls_below_the_threshold_are_thin_and_counted(fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.script = [Scripted(native_two_calls())]
    client = await proxy(margins=True, margin_threshold=1.0)
    response = await client.post("/v1/chat/completions", json=body())
    answer = await response.json()
    assert response.status == 200 and "logprobs" not in answer["choices"][0]
    first, second = attempts(tmp_path / "events.jsonl")[0]["calls"]
    assert first["name_margin"] == pytest.approx(GET_ORDER_NAME_MARGIN)
    assert first["thin_margin"] is True
    assert second["name_margin"] == pytest.approx(CANCEL_NAME_MARGIN)
    assert "thin_margin" not in second
    metrics = (await (await client.get("/metrics")).read()).decode()
    assert metric(metrics, 'reflexguard_thin_margin_calls_total{model="m"}') == 1
    assert metric(metrics, 'reflexguard_tool_name_margin_count{model="m"}') == 2


async def test_an_agent_that_asked_for_logprobs_keeps_them_and_its_request(fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.script = [Scripted(native_two_calls())]
    client = await proxy(margins=True)
    response = await client.post("/v1/chat/completions",
                                 json=body(logprobs=True, top_logprobs=2))
    answer = await response.json()
    assert upstream.requests[0]["top_logprobs"] == 2
    assert answer["choices"][0]["logprobs"] == native_two_calls()["choices"][0]["logprobs"]
    assert attempts(tmp_path / "events.jsonl")[0]["calls"][0]["name_margin"] == \
        pytest.approx(GET_ORDER_NAME_MARGIN)


async def test_re_asks_ask_for_logprobs_and_the_repaired_answer_is_stripped(fake, proxy, tmp_path):
    upstream, _ = fake
    hallucinated = native_two_calls()
    message = hallucinated["choices"][0]["message"]
    message["tool_calls"] = message["tool_calls"][:1]
    message["tool_calls"][0]["function"]["name"] = "get_order"  # not offered
    repaired = copy.deepcopy(native_two_calls())
    upstream.script = [Scripted(hallucinated), Scripted(repaired)]
    client = await proxy(margins=True)
    response = await client.post("/v1/chat/completions", json=body())
    answer = await response.json()
    assert upstream.calls == 2
    assert all(r["logprobs"] is True for r in upstream.requests)
    assert "logprobs" not in answer["choices"][0]
    first, second = attempts(tmp_path / "events.jsonl")
    # The parsed name is not what the tokens spell: its margin is unknown, not guessed.
    assert first["calls"][0]["channel"] == "unknown_tool"
    assert first["calls"][0]["name_margin"] is None
    assert second["calls"][1]["name_margin"] == pytest.approx(CANCEL_NAME_MARGIN)


async def test_an_upstream_without_logprobs_is_counted_once_per_request(fake, proxy, tmp_path):
    upstream, _ = fake
    plain = tool_call_completion("get_order", {})  # no logprobs, and invalid: two attempts
    upstream.script = [Scripted(plain), Scripted(tool_call_completion("get_order_details", {}))]
    client = await proxy(margins=True)
    response = await client.post("/v1/chat/completions", json=body())
    assert response.status == 200 and upstream.calls == 2
    metrics = (await (await client.get("/metrics")).read()).decode()
    assert metric(metrics, 'reflexguard_fallbacks_total{kind="margins_unavailable"}') == 1
    assert all("name_margin" not in c for e in attempts(tmp_path / "events.jsonl")
               for c in e["calls"])


async def test_margins_off_asks_for_nothing_and_passes_logprobs_through(fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.script = [Scripted(native_two_calls())]
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=body())
    assert "logprobs" not in upstream.requests[0]
    assert (await response.json())["choices"][0]["logprobs"] is not None  # the upstream's
    assert all("name_margin" not in c for c in attempts(tmp_path / "events.jsonl")[0]["calls"])


def with_streamed_logprobs(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """The completion's chunks, its logprob entries spread over them in order, as vLLM
    sends each delta's tokens with that delta."""
    chunks = stream_chunks(completion, include_usage=False)
    entries = completion["choices"][0]["logprobs"]["content"]
    carriers = chunks[:-1]
    share = -(-len(entries) // len(carriers))
    for number, chunk in enumerate(carriers):
        part = entries[number * share:(number + 1) * share]
        chunk["choices"][0]["logprobs"] = {"content": part} if part else None
    return chunks


@pytest.fixture
async def logprob_stream() -> AsyncIterator[tuple[list[dict[str, Any]], TestServer]]:
    """An upstream that streams `replies[0]` with per-chunk logprobs."""
    replies: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in with_streamed_logprobs(replies[0]):
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = TestServer(app)
    await server.start_server()
    yield replies, server
    await server.close()


async def read_stream(response: Any) -> list[dict[str, Any]]:
    text = (await response.read()).decode()
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: {")]


async def test_streamed_calls_get_margins_from_the_accumulated_tokens(logprob_stream, proxy,
                                                                     tmp_path):
    replies, server = logprob_stream
    replies.append(native_two_calls())
    client = await proxy(upstream=str(server.make_url("/v1")), margins=True,
                         margin_threshold=1.0)
    response = await client.post("/v1/chat/completions", json=body(stream=True))
    chunks = await read_stream(response)
    assert response.status == 200 and chunks
    assert not any(c.get("logprobs") for chunk in chunks for c in chunk["choices"])
    first, second = attempts(tmp_path / "events.jsonl")[0]["calls"]
    assert first["name_margin"] == pytest.approx(GET_ORDER_NAME_MARGIN)
    assert first["thin_margin"] is True
    assert second["name_margin"] == pytest.approx(CANCEL_NAME_MARGIN)


async def test_streamed_text_passes_through_without_our_logprobs(logprob_stream, proxy):
    replies, server = logprob_stream
    replies.append(RECORDED["completions"]["unicode_no_tools"])
    client = await proxy(upstream=str(server.make_url("/v1")), margins=True)
    response = await client.post("/v1/chat/completions", json=body(stream=True))
    chunks = await read_stream(response)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c["choices"])
    assert text == RECORDED["completions"]["unicode_no_tools"]["choices"][0]["message"]["content"]
    assert not any(c.get("logprobs") for chunk in chunks for c in chunk["choices"])


async def test_streamed_logprobs_reach_an_agent_that_asked(logprob_stream, proxy):
    replies, server = logprob_stream
    replies.append(RECORDED["completions"]["unicode_no_tools"])
    client = await proxy(upstream=str(server.make_url("/v1")), margins=True)
    response = await client.post("/v1/chat/completions",
                                 json=body(stream=True, logprobs=True, top_logprobs=5))
    chunks = await read_stream(response)
    assert any(c.get("logprobs") for chunk in chunks for c in chunk["choices"])


def messages_request() -> dict[str, Any]:
    return {"model": "m", "max_tokens": 256,
            "messages": [{"role": "user", "content": "Cancel order #W123."}],
            "tools": [{"name": t["function"]["name"], "input_schema": OPEN} for t in TOOLS]}


async def test_messages_translated_to_chat_get_margins(fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.script = [Scripted(native_two_calls())]
    client = await proxy(margins=True, upstream_dialects=["chat"])
    response = await client.post("/v1/messages", json=messages_request())
    answer = await response.json()
    assert response.status == 200 and answer["type"] == "message"
    assert upstream.paths == ["/v1/chat/completions"] and upstream.requests[0]["logprobs"]
    [event] = attempts(tmp_path / "events.jsonl")
    assert event["dialect"] == "messages"
    assert event["calls"][1]["name_margin"] == pytest.approx(CANCEL_NAME_MARGIN)


async def test_native_messages_ask_for_no_logprobs(fake, proxy, tmp_path):
    upstream, _ = fake
    upstream.script = [Scripted({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_order_details",
                     "input": {}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1}})]
    client = await proxy(margins=True)
    response = await client.post("/v1/messages", json=messages_request())
    assert response.status == 200 and upstream.paths == ["/v1/messages"]
    assert "logprobs" not in upstream.requests[0]
    metrics = (await (await client.get("/metrics")).read()).decode()
    assert 'kind="margins_unavailable"' not in metrics
