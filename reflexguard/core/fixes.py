"""Opt-in deterministic fixes, tried before asking the model again. Nothing here does I/O.

Each fix is reported by name so that it is counted: a fixed call was still an error of
the model's, and an operator must see how often the proxy papered over one.
"""

from __future__ import annotations

from dataclasses import dataclass

import json_repair
import orjson
from rapidfuzz import fuzz, process

from reflexguard.core.channels import Channel
from reflexguard.core.model import Reply, ToolCall, Verdict
from reflexguard.core.toolset import ToolSet

JSON_REPAIRED = "json_repaired"
NAME_SNAPPED = "name_snapped"


@dataclass(frozen=True)
class FixPolicy:
    json_repair: bool = False
    snap_names: bool = False
    snap_threshold: float = 85.0


def _repaired_json(arguments: str) -> str | None:
    try:
        value = json_repair.loads(arguments)
    except Exception:  # json-repair is best effort; a failure means "no fix"
        return None
    if not isinstance(value, dict):
        return None
    return orjson.dumps(value).decode()


def _snapped_name(name: str, toolset: ToolSet, threshold: float) -> str | None:
    best = process.extractOne(name, toolset.names, scorer=fuzz.ratio)
    if best is None or best[1] < threshold:
        return None
    return str(best[0])


def apply_fixes(
    reply: Reply, verdict: Verdict, toolset: ToolSet, policy: FixPolicy
) -> tuple[Reply, list[str]]:
    """The reply with what can be fixed without the model, and the fixes applied."""
    if not (policy.json_repair or policy.snap_names) or not reply.tool_calls:
        return reply, []
    applied: list[str] = []
    calls = list(reply.tool_calls)
    for call_verdict in verdict.calls:
        if call_verdict.index is None:
            continue
        call = calls[call_verdict.index]
        if call_verdict.channel is Channel.UNKNOWN_TOOL and policy.snap_names:
            snapped = _snapped_name(call.name, toolset, policy.snap_threshold)
            if snapped:
                calls[call_verdict.index] = ToolCall(
                    id=call.id, name=snapped, arguments=call.arguments
                )
                applied.append(NAME_SNAPPED)
        elif call_verdict.channel is Channel.MALFORMED_ARGS and policy.json_repair:
            repaired = _repaired_json(call.arguments)
            if repaired is not None:
                calls[call_verdict.index] = ToolCall(id=call.id, name=call.name, arguments=repaired)
                applied.append(JSON_REPAIRED)
    if not applied:
        return reply, []
    fixed = Reply(content=reply.content, tool_calls=tuple(calls), finish_reason=reply.finish_reason)
    return fixed, applied
