"""Opt-in deterministic fixes: JSON repair and near-miss name snapping."""

from __future__ import annotations

from reflexguard.core.fixes import JSON_REPAIRED, NAME_SNAPPED, FixPolicy, apply_fixes
from reflexguard.core.model import Reply, ToolCall
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply
from tests.conftest import TOOLS

TOOLSET = ToolSetCache().get(TOOLS)
RULES = CallRules(toolset=TOOLSET)


def fix(call: ToolCall, policy: FixPolicy) -> tuple[Reply, list[str]]:
    reply = Reply(tool_calls=(call,))
    return apply_fixes(reply, validate_reply(reply, RULES), TOOLSET, policy)


def test_json_repair_only_when_enabled() -> None:
    broken = ToolCall(id="c", name="cancel_order", arguments='{"order_id": "1",')
    fixed, applied = fix(broken, FixPolicy(json_repair=True))
    assert applied == [JSON_REPAIRED]
    assert validate_reply(fixed, RULES).valid
    assert fix(broken, FixPolicy()) == (Reply(tool_calls=(broken,)), [])


def test_snapping_respects_the_threshold() -> None:
    near = ToolCall(id="c", name="cancel_ordr", arguments='{"order_id": "1"}')
    far = ToolCall(id="c", name="refund", arguments='{"order_id": "1"}')
    fixed, applied = fix(near, FixPolicy(snap_names=True))
    assert applied == [NAME_SNAPPED] and fixed.tool_calls[0].name == "cancel_order"
    assert fix(far, FixPolicy(snap_names=True))[1] == []
