"""The clean-answer shortcut (validate.clean_tool_calls) against the full reading.

The shortcut may only say "all ok" where read_attempt + validate_reply say so too; it may
decline anything (the full reading then runs). Both halves are checked on one corpus, and
the answers an agent gets most (valid calls) must take the shortcut, or it saves nothing.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from reflexguard.core.attempts import read_attempt
from reflexguard.core.grounding import DEFAULT_PATTERN, collect_sources
from reflexguard.core.model import JsonObject, ToolChoice
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, clean_tool_calls
from tests.conftest import TOOLS
from tests.fakes.fake_upstream import completion_with_message, text_completion, tool_call_completion

TOOLSET = ToolSetCache().get(TOOLS)
RULES = CallRules(toolset=TOOLSET)
GOOD = {"order_id": "#W1234567", "detail": "full"}


def calls_message(*calls: tuple[str, Any]) -> JsonObject:
    return completion_with_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function",
         "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(calls)]}, "tool_calls")


def two_choices(second: JsonObject) -> JsonObject:
    answer = tool_call_completion("get_order_details", GOOD)
    answer["choices"].append({**second["choices"][0], "index": 1})
    return answer


CLEAN: dict[str, tuple[JsonObject, CallRules]] = {
    "one valid call": (tool_call_completion("get_order_details", GOOD), RULES),
    "valid call with text beside it": (
        tool_call_completion("cancel_order", {"order_id": "#W1"}, content="Cancelling."), RULES),
    "two valid calls": (calls_message(("get_order_details", '{"order_id":"1","detail":"brief"}'),
                                      ("cancel_order", '{"order_id":"1"}')), RULES),
    "named choice obeyed": (tool_call_completion("cancel_order", {"order_id": "1"}),
                            CallRules(TOOLSET, ToolChoice(mode="named", name="cancel_order"))),
    "required choice obeyed": (tool_call_completion("cancel_order", {"order_id": "1"}),
                               CallRules(TOOLSET, ToolChoice(mode="required"))),
    "two valid choices": (two_choices(tool_call_completion("cancel_order", {"order_id": "2"})),
                          RULES),
}

DECLINED: dict[str, tuple[JsonObject, CallRules]] = {
    "unknown tool": (tool_call_completion("get_order_detail", GOOD), RULES),
    "malformed arguments": (tool_call_completion("cancel_order", '{"order_id": "1"'), RULES),
    "arguments not an object": (tool_call_completion("cancel_order", "[1]"), RULES),
    "arguments as an object": (calls_message(("cancel_order", {"order_id": "1"})), RULES),
    "schema violation": (tool_call_completion("get_order_details", {"order_id": "1"}), RULES),
    "enum violation": (tool_call_completion("get_order_details",
                                            {"order_id": "1", "detail": "all"}), RULES),
    "choice none": (tool_call_completion("cancel_order", {"order_id": "1"}),
                    CallRules(TOOLSET, ToolChoice(mode="none"))),
    "named choice broken": (tool_call_completion("get_order_details", GOOD),
                            CallRules(TOOLSET, ToolChoice(mode="named", name="cancel_order"))),
    "parallel calls forbidden": (calls_message(("cancel_order", '{"order_id":"1"}'),
                                               ("cancel_order", '{"order_id":"2"}')),
                                 CallRules(TOOLSET, parallel_tool_calls=False)),
    "text answer": (text_completion("Your order ships tomorrow."), RULES),
    "call written as text": (text_completion('[{"name": "cancel_order", "arguments": {}}]'),
                             RULES),
    "empty reply": (text_completion(None), RULES),
    "no choices": ({"id": "x", "choices": []}, RULES),
    "choices not a list": ({"id": "x", "choices": {"0": 1}}, RULES),
    "call without function": (completion_with_message(
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}, "tool_calls"),
        RULES),
    "name not a string": (calls_message((7, '{"order_id":"1"}')), RULES),  # type: ignore[arg-type]
    "one bad choice of two": (two_choices(tool_call_completion("nope", GOOD)), RULES),
    "grounding on": (tool_call_completion("cancel_order", {"order_id": "#W7777777"}),
                     CallRules(TOOLSET, grounding=collect_sources([], False),
                               identifier_pattern=re.compile(DEFAULT_PATTERN))),
}


def full_reading(completion: JsonObject, rules: CallRules) -> tuple[bool, tuple[str, ...]]:
    attempt = read_attempt(1, "initial", completion, rules, True, 0.0)
    valid = attempt.valid and not any(v.internal_events for v in attempt.verdicts)
    names = tuple(call.name for reply in attempt.replies for call in reply.tool_calls)
    return valid and not attempt.changed, names


@pytest.mark.parametrize("case", list(CLEAN))
def test_valid_calls_take_the_shortcut_with_the_full_readings_names(case: str) -> None:
    completion, rules = CLEAN[case]
    valid, names = full_reading(completion, rules)
    assert valid
    assert clean_tool_calls(completion, rules) == names


@pytest.mark.parametrize("case", list(DECLINED))
def test_the_shortcut_declines_what_the_full_reading_flags_or_must_read(case: str) -> None:
    completion, rules = DECLINED[case]
    assert clean_tool_calls(completion, rules) is None


@pytest.mark.parametrize("case", list(CLEAN) + list(DECLINED))
def test_the_shortcut_never_says_clean_where_the_full_reading_does_not(case: str) -> None:
    completion, rules = {**CLEAN, **DECLINED}[case]
    if clean_tool_calls(completion, rules) is not None:
        assert full_reading(completion, rules)[0]


def test_the_shortcut_leaves_the_answer_untouched() -> None:
    completion, rules = CLEAN["two valid calls"]
    before = copy.deepcopy(completion)
    clean_tool_calls(completion, rules)
    assert completion == before


def test_a_validator_fault_is_left_to_the_full_reading() -> None:
    class Broken:
        def is_valid(self, _: object) -> bool:
            raise RuntimeError("validator fault")

    spec = TOOLSET.specs["cancel_order"]
    broken = type(spec)(spec.name, spec.parameters, Broken())
    toolset = type(TOOLSET)(TOOLSET.digest, {**TOOLSET.specs, "cancel_order": broken},
                            TOOLSET.schema_text, TOOLSET.depth)
    completion = tool_call_completion("cancel_order", {"order_id": "1"})
    assert clean_tool_calls(completion, CallRules(toolset)) is None
