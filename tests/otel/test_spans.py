"""The spans reflexguard exports with `otel` on, read back from a real OTLP receiver:
names, kinds, parent links, traceparent continued from the agent and sent upstream, and
the GenAI attributes of a valid call, a repaired one, an exhausted ladder, an upstream
failure and a stream. Nothing sensitive goes out by default."""

from __future__ import annotations

import json
from typing import Any

from reflexguard.ops.otel_attributes import ATTRIBUTE_LIMIT, response_attributes
from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, text_completion, tool_call_completion
from tests.otel.conftest import flush
from tests.otel.receiver import ReceivedSpan, Receiver

GOOD = {"order_id": "#W1234567", "detail": "full"}
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SECRET = "sk-do-not-export"


def valid() -> Scripted:
    return Scripted(tool_call_completion("get_order_details", GOOD))


def unknown() -> Scripted:
    return Scripted(tool_call_completion("get_order_detail", GOOD))


async def post(client: Any, **headers: str) -> Any:
    response = await client.post("/v1/chat/completions", json=chat_body(), headers={
        "traceparent": TRACEPARENT, "x-reflexguard-session": "conv-7",
        "Authorization": f"Bearer {SECRET}", **headers})
    await response.read()
    return response


def one(spans: list[ReceivedSpan], prefix: str) -> ReceivedSpan:
    found = [s for s in spans if s.name.startswith(prefix)]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


async def spans_of(otlp: Receiver, count: int) -> list[ReceivedSpan]:
    await flush()
    spans = otlp.trace(CALLER_TRACE)
    assert len(spans) == count, [(s.name, s.kind) for s in spans]
    return spans


def traceparent_parent(headers: dict[str, str]) -> tuple[str, str]:
    _, trace_id, parent, _ = headers["traceparent"].split("-")
    return trace_id, parent


async def test_valid_call_continues_the_callers_trace_and_propagates_it(fake, proxy, otlp):
    upstream, _ = fake
    upstream.script = [valid()]
    client = await proxy(otel=True)
    response = await post(client)
    assert response.status == 200
    assert float(response.headers["x-reflexguard-overhead-ms"]) >= 0
    spans = await spans_of(otlp, 3)
    server = one(spans, "POST /v1/chat/completions")
    inference = one(spans, "chat m")
    guard = one(spans, "apply_guardrail")
    assert (server.kind, inference.kind, guard.kind) == ("SERVER", "CLIENT", "INTERNAL")
    assert server.parent_id == CALLER_SPAN
    assert inference.parent_id == server.span_id and guard.parent_id == server.span_id
    # The upstream got this trace, with our CLIENT span as its parent.
    assert traceparent_parent(upstream.headers[0]) == (CALLER_TRACE, inference.span_id)
    assert inference.attributes == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "m", "gen_ai.request.stream": False,
        "gen_ai.conversation.id": "conv-7", "server.address": "127.0.0.1",
        "server.port": inference.attributes["server.port"],
        "gen_ai.response.model": "fake-upstream", "gen_ai.response.id": "chatcmpl-fake",
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 10,
        "reflexguard.attempt.kind": "initial", "reflexguard.attempt": 1}
    assert guard.attributes["gen_ai.operation.name"] == "apply_guardrail"
    assert guard.attributes["gen_ai.guardrail.result.value"] == "clean"
    assert guard.attributes["gen_ai.guardrail.policy.id"].startswith("toolset:")
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["reflexguard.overhead_ms"] >= 0
    assert server.resource["service.name"] == "reflexguard-test"
    # OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: no deprecated gen_ai.system
    assert "gen_ai.system" not in inference.attributes


async def test_nothing_sensitive_is_exported_by_default(fake, proxy, otlp):
    upstream, _ = fake
    upstream.script = [unknown(), valid()]
    client = await proxy(otel=True)
    assert (await post(client)).status == 200
    spans = await spans_of(otlp, 4)
    exported = json.dumps([[s.attributes, s.events] for s in spans])
    for private in (SECRET, "#W1234567", "retail agent", "Show me order", '"order_id"'):
        assert private not in exported
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.definitions"))
                   for s in spans for k in s.attributes)


async def test_contents_only_when_the_operator_opts_in(fake, proxy, otlp, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    upstream, _ = fake
    upstream.script = [valid()]
    client = await proxy(otel=True)
    assert (await post(client)).status == 200
    inference = one(await spans_of(otlp, 3), "chat m")
    assert "Show me order" in inference.attributes["gen_ai.input.messages"]
    assert "get_order_details" in inference.attributes["gen_ai.tool.definitions"]
    assert "#W1234567" in inference.attributes["gen_ai.output.messages"]


async def test_a_repaired_call_is_two_inference_spans_under_the_decision(fake, proxy, otlp):
    upstream, _ = fake
    upstream.script = [unknown(), valid()]
    client = await proxy(otel=True)
    response = await post(client)
    assert response.status == 200 and response.headers["x-reflexguard-attempts"] == "2"
    spans = await spans_of(otlp, 4)
    server = one(spans, "POST")
    guard = one(spans, "apply_guardrail")
    first, reask = [s for s in spans if s.name == "chat m"]
    assert first.parent_id == server.span_id and guard.parent_id == server.span_id
    assert reask.parent_id == guard.span_id  # the repair happens inside the decision
    assert (first.attributes["reflexguard.attempt.kind"],
            reask.attributes["reflexguard.attempt.kind"]) == ("initial", "re-ask")
    assert guard.attributes["gen_ai.guardrail.result.type"] == "outcome"
    assert guard.attributes["gen_ai.guardrail.result.value"] == "fixed_by_reask"
    assert guard.attributes["gen_ai.guardrail.result.reason"] == "unknown_tool: get_order_detail"
    assert guard.events == [("gen_ai.guardrail.result", {
        "gen_ai.guardrail.component.name": "reflexguard",
        "gen_ai.guardrail.result.type": "channel",
        "gen_ai.guardrail.result.value": "unknown_tool", "gen_ai.tool.name": "get_order_detail",
        "reflexguard.attempt": 1, "reflexguard.attempt.kind": "initial"})]
    assert [traceparent_parent(h)[1] for h in upstream.headers] == [first.span_id,
                                                                    reask.span_id]
    assert first.end_ns <= guard.start_ns <= reask.start_ns <= reask.end_ns <= guard.end_ns


async def test_an_exhausted_ladder_says_so_with_every_attempt(fake, proxy, otlp):
    upstream, _ = fake
    # Two different invalid calls: a repeated one would stop the ladder early instead.
    upstream.script = [unknown(), Scripted(tool_call_completion(
        "get_order_details", {"order_id": "#W1234567"}))]
    client = await proxy(otel=True, max_repairs=1, constrained_retry="tool_choice")
    assert (await post(client)).status == 200
    spans = await spans_of(otlp, 4)
    guard = one(spans, "apply_guardrail")
    kinds = [s.attributes["reflexguard.attempt.kind"] for s in spans if s.kind == "CLIENT"]
    assert kinds == ["initial", "constrained"]
    assert guard.attributes["gen_ai.guardrail.result.value"] == "exhausted"
    assert guard.attributes["reflexguard.attempts"] == 2
    assert guard.attributes["gen_ai.guardrail.result.reason"] == (
        "schema_violation: get_order_details; unknown_tool: get_order_detail")
    assert [e[1]["reflexguard.attempt.kind"] for e in guard.events] == ["initial",
                                                                      "constrained"]


async def test_an_upstream_failure_is_an_error_on_both_spans(fake, proxy, otlp):
    upstream, _ = fake
    upstream.script = [Scripted(status=500, body=b'{"error": {"message": "boom"}}')]
    client = await proxy(otel=True)
    assert (await post(client)).status == 500
    spans = await spans_of(otlp, 2)  # no decision was made
    server, inference = one(spans, "POST"), one(spans, "chat m")
    assert inference.attributes["error.type"] == "500" and inference.status == 2
    assert server.attributes["error.type"] == "500" and server.status == 2
    assert server.attributes["http.response.status_code"] == 500


async def test_an_unreachable_upstream_names_the_fault(proxy, otlp):
    client = await proxy(otel=True, upstream="http://127.0.0.1:9/v1")
    assert (await post(client)).status == 502
    inference = one(await spans_of(otlp, 2), "chat m")
    assert inference.attributes["error.type"] == "UpstreamUnreachable"


async def test_a_stream_is_one_inference_span_with_its_usage(fake, proxy, otlp):
    upstream, _ = fake
    upstream.script = [valid()]
    client = await proxy(otel=True)
    response = await client.post("/v1/chat/completions", json=chat_body(
        stream=True, stream_options={"include_usage": True}),
        headers={"traceparent": TRACEPARENT})
    assert response.status == 200 and b"[DONE]" in await response.read()
    spans = await spans_of(otlp, 3)
    inference = one(spans, "chat m")
    assert inference.attributes["gen_ai.request.stream"] is True
    assert inference.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert inference.attributes["gen_ai.usage.output_tokens"] == 10
    assert traceparent_parent(upstream.headers[0]) == (CALLER_TRACE, inference.span_id)
    assert one(spans, "apply_guardrail").attributes["gen_ai.guardrail.result.value"] == "clean"


async def test_an_unguarded_request_still_carries_the_trace_upstream(fake, proxy, otlp):
    upstream, _ = fake
    upstream.script = [Scripted(text_completion("hi"))]
    client = await proxy(otel=True)
    body = chat_body()
    del body["tools"]
    response = await client.post("/v1/chat/completions", json=body,
                                 headers={"traceparent": TRACEPARENT})
    assert response.status == 200
    server = one(await spans_of(otlp, 1), "POST")
    assert traceparent_parent(upstream.headers[0]) == (CALLER_TRACE, server.span_id)


async def test_metrics_have_the_conventions_buckets(fake, proxy, otlp):
    upstream, _ = fake
    upstream.script = [unknown(), valid()]
    client = await proxy(otel=True)
    assert (await post(client)).status == 200
    await flush()
    metrics = {m["name"]: m for m in otlp.metrics}
    duration = metrics["gen_ai.client.operation.duration"]
    tokens = metrics["gen_ai.client.token.usage"]
    assert duration["unit"] == "s" and tokens["unit"] == "{token}"
    points = duration["histogram"]["dataPoints"]
    assert points[0]["explicitBounds"][:3] == [0.01, 0.02, 0.04]
    assert sum(int(p["count"]) for p in points) == 2  # one per upstream attempt
    kinds = {a["value"]["stringValue"] for p in tokens["histogram"]["dataPoints"]
             for a in p["attributes"] if a["key"] == "gen_ai.token.type"}
    assert kinds == {"input", "output"}
    assert tokens["histogram"]["dataPoints"][0]["explicitBounds"][:3] == [1, 4, 16]


async def test_margins_on_put_the_logit_margins_on_the_decision(fake, proxy, otlp):
    from pathlib import Path

    import pytest

    from reflexguard.core.margins import completion_margins

    recorded = json.loads((Path(__file__).parents[1] / "core/fixtures/"
                           "qwen05b_q4km_logprobs.json").read_text())["completions"]["call"]
    upstream, _ = fake
    upstream.script = [Scripted(recorded)]
    client = await proxy(otel=True, margins=True, tool_call_format="content")
    open_schema = {"type": "object", "properties": {}}
    body = {"model": "m", "messages": [{"role": "user", "content": "Cancel order #W123."}],
            "tools": [{"type": "function", "function": {"name": name,
                                                        "parameters": open_schema}}
                      for name in ("get_order_details", "cancel_pending_order")]}
    response = await client.post("/v1/chat/completions", json=body,
                                 headers={"traceparent": TRACEPARENT})
    assert response.status == 200
    guard = one(await spans_of(otlp, 3), "apply_guardrail")
    [expected] = completion_margins(recorded)
    assert guard.attributes["reflexguard.tool_name_margins"] == [
        pytest.approx(expected.name_margin)]
    assert guard.attributes["reflexguard.tool_name_margin.min"] == pytest.approx(
        expected.name_margin)


def test_span_attributes_copied_from_the_upstream_are_clipped() -> None:
    """A 100 KB model name or id rides in every queued span otherwise (issue 30)."""
    huge = "m" * 100_000
    attributes = response_attributes({"model": huge, "id": huge, "choices": [
        {"finish_reason": huge}], "reflexguard_native": {"stop_reason": huge}})
    for name in ("gen_ai.response.model", "gen_ai.response.id"):
        assert len(attributes[name]) <= ATTRIBUTE_LIMIT + 1, name
    assert all(len(r) <= ATTRIBUTE_LIMIT + 1 for r in attributes["gen_ai.response.finish_reasons"])
    small = response_attributes({"model": "qwen", "id": "c1"})
    assert small["gen_ai.response.model"] == "qwen" and small["gen_ai.response.id"] == "c1"
