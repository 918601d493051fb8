"""The native routes' clean-answer shortcut (dialect_call.DialectCall.clean_names), end to
end through real sockets: a valid non-streamed Messages or Responses answer takes it, an
invalid one does not, and what a client and an operator observe is the same on both paths
(the body's bytes, the headers, the events file, the metrics, the log, the session record).
The upstream is the scripted fake (simulated replies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from reflexguard.core.budget import BUDGET_HEADER, REMAINING_HEADER
from reflexguard.http import dialect_call
from reflexguard.http.app import GUARD_KEY
from reflexguard.ops import tracing
from tests.fakes.fake_upstream import Scripted
from tests.fakes.native_replies import (
    anthropic_call,
    anthropic_message,
    function_call,
    openai_response,
    reasoning_item,
    thinking_block,
    tool_use,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

CANCEL = {"order_id": "#W1"}
VALID = {
    "messages": anthropic_message(thinking_block("look it up"),
                                  tool_use("get_order_details", GOOD),
                                  tool_use("cancel_order", CANCEL, "toolu_2"), stop="tool_use"),
    "responses": openai_response(reasoning_item("look it up"),
                                 function_call("get_order_details", GOOD),
                                 function_call("cancel_order", CANCEL, "call_2")),
}
INVALID = {
    "messages": anthropic_call("get_order_details", {"order_id": "#W1234567"}),
    "responses": openai_response(function_call("get_order_details", '{"order_id": "#W1')),
}
REPAIRED = {
    "messages": anthropic_call("get_order_details", GOOD, call_id="toolu_9"),
    "responses": openai_response(function_call("get_order_details", GOOD, "call_9")),
}
# Differ per request by nature: an id, a time, and the date of the response.
PER_REQUEST_HEADERS = {"x-reflexguard-request-id", "x-reflexguard-overhead-ms", "Date"}
PER_REQUEST_FIELDS = {"ts", "request_id", "latency_ms"}


def body_of(dialect: str) -> dict[str, Any]:
    return messages_body() if dialect == "messages" else responses_body()


class Spy:
    """Counts the shortcut's answers and the full reading's attempts on the route."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, shortcut: bool = True) -> None:
        self.clean = self.read = 0
        clean, read = dialect_call.DialectCall.clean, dialect_call.read_attempt

        def counted_clean(call: Any, *args: Any) -> Any:
            self.clean += 1
            return clean(call, *args)

        def counted_read(*args: Any, **kwargs: Any) -> Any:
            self.read += 1
            return read(*args, **kwargs)

        monkeypatch.setattr(dialect_call.DialectCall, "clean", counted_clean)
        monkeypatch.setattr(dialect_call, "read_attempt", counted_read)
        if not shortcut:  # the route as it was: every answer read in full
            monkeypatch.setattr(dialect_call, "CLEAN_CALLS", {})


@pytest.mark.parametrize("dialect", ["messages", "responses"])
async def test_a_valid_answer_takes_the_shortcut_with_the_upstreams_bytes(
        fake, proxy, monkeypatch, dialect):
    upstream, _ = fake
    upstream.script = [Scripted(VALID[dialect])]
    spy = Spy(monkeypatch)
    response = await (await proxy()).post(f"/v1/{dialect}", json=body_of(dialect))
    assert response.status == 200
    assert await response.read() == json.dumps(VALID[dialect]).encode()  # as it came
    assert (spy.clean, spy.read, upstream.calls) == (1, 0, 1)
    assert response.headers["x-reflexguard-attempts"] == "1"


@pytest.mark.parametrize("dialect", ["messages", "responses"])
async def test_an_invalid_answer_takes_the_ladder(fake, proxy, monkeypatch, dialect):
    upstream, _ = fake
    upstream.script = [Scripted(INVALID[dialect]), Scripted(REPAIRED[dialect])]
    spy = Spy(monkeypatch)
    response = await (await proxy()).post(f"/v1/{dialect}", json=body_of(dialect))
    assert response.status == 200
    assert (spy.clean, upstream.calls) == (0, 2)
    assert spy.read >= 1
    assert response.headers["x-reflexguard-violations"] == "1"
    answer = await response.json()  # rewritten by the ladder (usage summed), the repair's call
    calls = [c for c in answer.get("content", answer.get("output", []))
             if c["type"] in ("tool_use", "function_call")]
    assert [c.get("call_id", c.get("id")) for c in calls] == [
        {"messages": "toolu_9", "responses": "call_9"}[dialect]]


@pytest.mark.parametrize("dialect", ["messages", "responses"])
async def test_with_tracing_on_the_answer_is_read_in_full(fake, proxy, monkeypatch, dialect):
    """The attempt's span is written from the chat view, which the shortcut never builds."""

    class Hooks(tracing.NoTracing):
        enabled = True

    upstream, _ = fake
    upstream.script = [Scripted(VALID[dialect])]
    spy = Spy(monkeypatch)
    monkeypatch.setattr(tracing, "hooks", Hooks())
    response = await (await proxy()).post(f"/v1/{dialect}", json=body_of(dialect))
    assert response.status == 200 and (spy.clean, spy.read) == (0, 1)


def observed_metrics(text: str) -> list[str]:
    """The metrics lines whose values a request's path sets; a histogram's sums and
    buckets hold times, which differ between any two requests."""
    return [line for line in text.splitlines()
            if line.startswith("reflexguard_") and "_bucket{" not in line
            and "_sum" not in line.split(" ")[0] and "_created" not in line.split(" ")[0]]


async def observe(proxy: Any, fake: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                  dialect: str, shortcut: bool, budget: str | None) -> tuple[Any, ...]:
    upstream, _ = fake
    upstream.script = [Scripted(VALID[dialect])]
    with monkeypatch.context() as patch:
        spy = Spy(patch, shortcut)
        events = tmp_path / f"events-{dialect}-{shortcut}-{budget}.jsonl"
        client = await proxy(events=events)
        sent = {"x-reflexguard-session": "s-1"}
        if budget is not None:
            sent[BUDGET_HEADER] = budget
        with capture_logs() as logs:
            response = await client.post(f"/v1/{dialect}", json=body_of(dialect),
                                         headers=sent)
            body = await response.read()
        assert (spy.clean, spy.read) == ((1, 0) if shortcut else (0, 1))
    guard = client.server.app[GUARD_KEY]
    record = guard.telemetry.sessions.local.peek("s-1")
    assert record is not None
    metrics = observed_metrics((await (await client.get("/metrics")).read()).decode())
    lines = [{k: v for k, v in json.loads(line).items() if k not in PER_REQUEST_FIELDS}
             for line in events.read_text().splitlines()]
    headers = {k: v for k, v in response.headers.items() if k not in PER_REQUEST_HEADERS}
    assert set(response.headers) >= PER_REQUEST_HEADERS - {"Date"}
    return (response.status, body, headers, lines, metrics, logs,
            record.model_dump(exclude={"first_seen", "last_seen"}))


@pytest.mark.parametrize("budget", [None, "5"], ids=["no budget", "an error budget"])
@pytest.mark.parametrize("dialect", ["messages", "responses"])
async def test_the_shortcut_is_observed_exactly_as_the_full_reading(
        fake, proxy, monkeypatch, tmp_path, dialect, budget):
    full = await observe(proxy, fake, monkeypatch, tmp_path, dialect, False, budget)
    short = await observe(proxy, fake, monkeypatch, tmp_path, dialect, True, budget)
    for what, a, b in zip(("status", "body", "headers", "events", "metrics", "logs",
                           "session"), full, short, strict=True):
        assert a == b, what
    status, _, headers, events, metrics, _, _ = short
    assert (REMAINING_HEADER in headers) == (budget is not None)
    assert status == 200 and [e["event"] for e in events] == ["attempt"]
    assert [(c["channel"], c["name"]) for c in events[0]["calls"]] == [
        ("ok", "get_order_details"), ("ok", "cancel_order")]
    assert any(line.startswith('reflexguard_tool_calls_total{channel="ok"')
               and f'dialect="{dialect}"' in line and line.endswith(" 2.0")
               for line in metrics)
