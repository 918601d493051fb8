"""`loop_guard: stop` through the proxy, every dialect, streamed and not, native and
translated: a re-ask that repeats again, or a repeat past its one re-ask, reaches the agent
as reflexguard's labelled text answer, with no call, and is counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.http.test_loop_guard_http import (
    CASES,
    PATHS,
    REPEATED,
    answer,
    called,
    counted,
    events,
    looping,
    post,
    proxy_settings,
)

LABEL = "[reflexguard stopped a repeated tool call]"


def answered_text(text: str, dialect: str, stream: bool) -> str:
    """The text the agent was answered with, in the dialect's grammar."""
    if not stream:
        body = json.loads(text)
        if dialect == "chat":
            return str(body["choices"][0]["message"]["content"] or "")
        if dialect == "messages":
            return "".join(b["text"] for b in body["content"] if b["type"] == "text")
        return "".join(part["text"] for item in body["output"] if item["type"] == "message"
                       for part in item["content"] if part["type"] == "output_text")
    pieces: list[str] = []
    for line in text.splitlines():
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        data = json.loads(line[5:])
        if dialect == "chat":
            pieces += [c.get("delta", {}).get("content") or "" for c in data.get("choices", [])]
        elif dialect == "messages" and data.get("type") == "content_block_delta" \
                and data["delta"].get("type") == "text_delta":
            pieces.append(data["delta"]["text"])
        elif dialect == "responses" and data.get("type") == "response.output_text.delta":
            pieces.append(data["delta"])
    return "".join(pieces)


@pytest.mark.parametrize(("dialect", "stream", "native"), CASES)
async def test_a_re_ask_that_repeats_again_reaches_the_agent_as_a_labelled_text(
        fake, proxy, tmp_path: Path, dialect: str, stream: bool, native: bool) -> None:
    upstream, _ = fake
    upstream.script = [answer(dialect, native, REPEATED), answer(dialect, native, REPEATED)]
    client = await proxy(**proxy_settings(native, loop_guard="stop"))
    text = await post(client, dialect, looping(dialect), stream)
    assert called(text, dialect, stream) == []
    said = answered_text(text, dialect, stream)
    assert said.startswith(LABEL) and "pending, 2 items" in said, said
    assert upstream.calls == 2
    metrics = await (await client.get("/metrics")).text()
    assert counted(metrics, "stopped", dialect) == 1.0
    assert 'reflexguard_fallbacks_total{kind="repeated_call_stopped"} 1.0' in metrics
    (record,) = events(tmp_path, "repeated_call")
    assert (record["action"], record["reason"]) == ("stopped", "repeated_again")


@pytest.mark.parametrize("dialect", ["chat", "messages", "responses"])
async def test_past_its_one_re_ask_a_repeat_is_stopped_without_an_upstream_re_ask(
        fake, proxy, dialect: str) -> None:
    upstream, _ = fake
    upstream.script = [answer(dialect, True, REPEATED)]
    client = await proxy(**proxy_settings(True, loop_guard="stop"))
    text = await post(client, dialect, looping(dialect, times=3), False)
    assert called(text, dialect, False) == [] and upstream.calls == 1
    assert "3 times" in answered_text(text, dialect, False)


async def test_a_stop_never_spends_the_error_budget(fake, proxy) -> None:
    upstream, _ = fake
    upstream.script = [answer("chat", True, REPEATED), answer("chat", True, REPEATED)]
    client = await proxy(loop_guard="stop")
    response = await client.post(PATHS["chat"], json=looping("chat"),
                                 headers={"x-reflexguard-error-budget": "1"})
    body: dict[str, Any] = await response.json()
    assert response.headers["x-reflexguard-budget-remaining"] == "1"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["content"].startswith(LABEL)
