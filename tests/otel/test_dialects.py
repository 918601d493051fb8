"""Every dialect, native and translated, streamed and not, exports the same trace: the
SERVER span, one CLIENT inference span per upstream attempt, the decision between."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.native_replies import anthropic_call, function_call, openai_response
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body
from tests.otel.conftest import flush
from tests.otel.receiver import Receiver

TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE}-b7ad6b7169203331-01"


def reply(dialect: str, native: bool, name: str) -> Scripted:
    if not native:
        return Scripted(tool_call_completion(name, GOOD))
    if dialect == "messages":
        return Scripted(anthropic_call(name, GOOD))
    return Scripted(openai_response(function_call(name, GOOD)))


def body(dialect: str, stream: bool) -> dict[str, Any]:
    made = messages_body() if dialect == "messages" else responses_body()
    return {**made, "stream": True} if stream else made


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("native", [True, False], ids=["native", "translated"])
@pytest.mark.parametrize("dialect", ["messages", "responses"])
async def test_a_repaired_dialect_call_is_traced_like_chat(fake, proxy, otlp: Receiver,
                                                          dialect, native, stream):
    upstream, _ = fake
    upstream.script = [reply(dialect, native, "get_order_detail"),
                       reply(dialect, native, "get_order_details")]
    settings: dict[str, Any] = {"otel": True}
    if not native:
        settings["upstream_dialects"] = ["chat"]
    client = await proxy(**settings)
    response = await client.post(f"/v1/{dialect}", json=body(dialect, stream),
                                 headers={"traceparent": TRACEPARENT,
                                          "anthropic-version": "2023-06-01",
                                          "x-reflexguard-session": "s-1"})
    assert response.status == 200, await response.text()
    await response.read()
    await flush()
    spans = otlp.trace(TRACE)
    names = sorted(s.name for s in spans)
    assert names == sorted([f"POST /v1/{dialect}", "apply_guardrail reflexguard", "chat m",
                            "chat m"]), names
    server = next(s for s in spans if s.kind == "SERVER")
    guard = next(s for s in spans if s.name.startswith("apply_guardrail"))
    first, reask = [s for s in spans if s.kind == "CLIENT"]
    assert first.parent_id == server.span_id and reask.parent_id == guard.span_id
    provider = "anthropic" if dialect == "messages" and native else "openai"
    for span in (first, reask):
        assert span.attributes["gen_ai.provider.name"] == provider
        assert span.attributes["gen_ai.conversation.id"] == "s-1"
        assert span.attributes["gen_ai.usage.input_tokens"] == 10
    assert first.attributes["gen_ai.request.stream"] is stream
    if native and dialect == "messages":  # the provider's own word, streamed or not
        for span in (first, reask):
            assert span.attributes["gen_ai.response.finish_reasons"] == ["tool_use"], stream
    assert (first.attributes["reflexguard.attempt.kind"],
            reask.attributes["reflexguard.attempt.kind"]) == ("initial", "re-ask")
    assert guard.attributes["gen_ai.guardrail.result.value"] == "fixed_by_reask"
    assert server.attributes["reflexguard.dialect"] == dialect
    sent = [h["traceparent"].split("-")[2] for h in upstream.headers]
    assert sent == [first.span_id, reask.span_id]
