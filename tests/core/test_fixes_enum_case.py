"""The enum-case fix: a string that is one `enum` member but for letter case is written as
that member (a counted safe fix, issue 30), and where it must not act."""

from __future__ import annotations

import json
from typing import Any

from reflexguard.core.fixes import ENUM_CASE_FIXED, MAX_ENUM_CASE_COMPARES, FixPolicy, apply_fixes
from reflexguard.core.model import Reply, ToolCall
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply


def rules_for(properties: dict[str, Any]) -> CallRules:
    tool = {"type": "function", "function": {"name": "buy", "parameters": {
        "type": "object", "required": sorted(properties), "properties": properties}}}
    return CallRules(toolset=ToolSetCache().get([tool]))


CONSOLES = rules_for({"platform": {"type": "string",
                                   "enum": ["Playstation", "Xbox", "Switch"]},
                      "tags": {"type": "array", "items": {"enum": ["new", "used"]}}})


def fix(arguments: dict[str, Any], rules: CallRules = CONSOLES,
        policy: FixPolicy | None = None) -> tuple[dict[str, Any], list[str], bool]:
    reply = Reply(tool_calls=(ToolCall(id="c", name="buy", arguments=json.dumps(arguments)),))
    out, applied = apply_fixes(reply, validate_reply(reply, rules), rules.toolset,
                               policy or FixPolicy())
    return (json.loads(out.tool_calls[0].arguments), applied,
            validate_reply(out, rules).valid)


def test_a_member_spelled_in_another_case_is_written_as_the_member() -> None:
    value, applied, valid = fix({"platform": "PlayStation", "tags": ["NEW", "Used"]})
    assert value == {"platform": "Playstation", "tags": ["new", "used"]}
    assert applied == [ENUM_CASE_FIXED] * 3 and valid


def test_members_that_differ_only_by_case_leave_the_choice_to_the_model() -> None:
    rules = rules_for({"unit": {"enum": ["mm", "Mm", "km"]}})
    value, applied, valid = fix({"unit": "MM"}, rules)
    assert value == {"unit": "MM"} and applied == [] and not valid
    # The unambiguous member beside them is still fixed.
    assert fix({"unit": "KM"}, rules)[:2] == ({"unit": "km"}, [ENUM_CASE_FIXED])


def test_a_value_that_is_no_member_in_any_case_is_left_to_a_re_ask() -> None:
    for wrong in ("PlayStation 5", "Play station", "Wii", ""):
        value, applied, valid = fix({"platform": wrong, "tags": []})
        assert value["platform"] == wrong and applied == [] and not valid, wrong


def test_a_valid_member_is_untouched_and_the_fix_is_off_with_the_safe_fixes() -> None:
    assert fix({"platform": "Xbox", "tags": ["new"]})[1] == []
    value, applied, _ = fix({"platform": "xbox", "tags": []}, policy=FixPolicy(safe=False))
    assert value["platform"] == "xbox" and applied == []


def test_a_huge_enum_is_compared_only_within_the_bound() -> None:
    members = [f"Member{i}" for i in range(MAX_ENUM_CASE_COMPARES // 2)]
    rules = rules_for({"a": {"enum": members}, "b": {"enum": members},
                       "c": {"enum": members}})
    value, applied, _ = fix({"a": "member1", "b": "MEMBER2", "c": "member3"}, rules)
    # Two enums fit in the budget, the third is left to a re-ask.
    assert value == {"a": "Member1", "b": "Member2", "c": "member3"}
    assert applied == [ENUM_CASE_FIXED] * 2
