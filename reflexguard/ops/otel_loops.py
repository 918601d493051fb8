"""What the `apply_guardrail` span says about repeated calls (the loop guard).

Nothing here does I/O or imports OpenTelemetry: the span is handed in (reflexguard.ops.otel
calls this from its decision, the one line it adds there), so the otel module keeps its
shape and this one its single subject.
"""

from __future__ import annotations

from typing import Any

COMPONENT = "reflexguard"


def loop_attributes(span: Any, result: Any) -> dict[str, Any]:
    """One `gen_ai.guardrail.result` event per repeated call on `span`, and the decision's
    attributes for the loop guard's action; nothing when no call repeated."""
    loop = getattr(result, "loop", None)
    if loop is None:
        return {}
    for position, repeat in loop.repeats:
        span.add_event("gen_ai.guardrail.result", {
            "gen_ai.guardrail.component.name": COMPONENT,
            "gen_ai.guardrail.result.type": "channel",
            "gen_ai.guardrail.result.value": "repeated_call",
            "gen_ai.tool.name": repeat.name,
            "reflexguard.repeated_call.times": repeat.times,
            "reflexguard.repeated_call.position": position,
            "reflexguard.attempt": 1,
        })
    attributes: dict[str, Any] = {"reflexguard.loop_guard.action": loop.action,
                                  "reflexguard.repeated_calls": len(loop.repeats)}
    if loop.reason is not None:
        attributes["reflexguard.loop_guard.reason"] = loop.reason
    return attributes
