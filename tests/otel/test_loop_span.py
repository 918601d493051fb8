"""The loop guard on the `apply_guardrail` span, read back from a real OTLP receiver: one
`gen_ai.guardrail.result` event per repeated call and the guard's action."""

from __future__ import annotations

from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.http.test_loop_guard_http import OTHER, REPEATED, looping
from tests.otel.conftest import flush
from tests.otel.test_spans import CALLER_TRACE, TRACEPARENT, one


async def test_a_replaced_repeat_is_on_the_guardrail_span(fake, proxy, otlp) -> None:
    upstream, _ = fake
    upstream.script = [Scripted(tool_call_completion(*REPEATED)),
                       Scripted(tool_call_completion(*OTHER))]
    client = await proxy(otel=True, loop_guard="repair")
    response = await client.post("/v1/chat/completions", json=looping("chat"),
                                 headers={"traceparent": TRACEPARENT})
    assert response.status == 200, await response.text()
    await flush()
    spans = otlp.trace(CALLER_TRACE)
    guard = one(spans, "apply_guardrail")
    assert guard.attributes["reflexguard.loop_guard.action"] == "replaced"
    assert guard.attributes["reflexguard.repeated_calls"] == 1
    assert guard.attributes["reflexguard.attempts"] == 2
    repeated = [attributes for name, attributes in guard.events
                if attributes.get("gen_ai.guardrail.result.value") == "repeated_call"]
    assert [(a["gen_ai.tool.name"], a["reflexguard.repeated_call.times"]) for a in repeated] \
        == [(REPEATED[0], 2)]
    kinds = [s.attributes.get("reflexguard.attempt.kind") for s in spans
             if s.name.startswith("chat ")]
    assert kinds == ["initial", "loop re-ask"]
