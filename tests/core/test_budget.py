"""The error budget: reading spent failures from each wire format, and the escalation."""

from __future__ import annotations

import re

import pytest

from reflexguard.core.attempts import LadderResult, read_attempt
from reflexguard.core.budget import (
    DEFAULT_ERROR_PATTERN,
    OVER_BUDGET_WITHHELD,
    Budget,
    chat_errors,
    messages_errors,
    parse_budget,
    policy_for_budget,
    responses_errors,
    within_budget,
)
from reflexguard.core.choice import returned_attempt
from reflexguard.core.errors import BadRequest
from reflexguard.core.ladder import MAX_REPAIRS_CEILING, GuardPolicy
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules
from tests.conftest import TOOLS
from tests.fakes.fake_upstream import completion_with_message

ERROR = re.compile(DEFAULT_ERROR_PATTERN)
BASE = GuardPolicy(max_repairs=2, constrained="tool_choice")


@pytest.mark.parametrize("value", ["1", " 7 ", "1000"])
def test_a_budget_is_a_whole_number(value: str) -> None:
    assert parse_budget(value) == int(value)


@pytest.mark.parametrize("value", ["0", "-1", "1001", "3.5", "three", "", "٣"])
def test_anything_else_is_a_bad_request(value: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_budget(value)
    assert caught.value.status == 400 and caught.value.code == "invalid_error_budget"


def test_remaining_never_goes_below_zero() -> None:
    assert Budget(3, 1).remaining == 2 and Budget(3, 5).remaining == 0


def test_chat_counts_tool_messages_that_report_an_error() -> None:
    messages = [
        {"role": "user", "content": "Error: not a tool message"},
        {"role": "tool", "tool_call_id": "a", "content": "Error: order not found"},
        {"role": "tool", "tool_call_id": "b", "content": [{"type": "text",
                                                           "text": "Error: bad id"}]},
        {"role": "tool", "tool_call_id": "c", "content": "{\"status\": \"ok\"}"},
        {"role": "tool", "tool_call_id": "d", "content": "no Error: here"},
        "not a message",
    ]
    assert chat_errors(messages, ERROR) == 2
    assert chat_errors(messages, re.compile("Error")) == 3


def test_messages_counts_tool_results_marked_is_error() -> None:
    messages = [
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "is_error": True, "content": "x"},
            {"type": "tool_result", "tool_use_id": "b", "content": "Error: not marked"},
            {"type": "tool_result", "tool_use_id": "c", "is_error": "true", "content": "x"},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "d", "is_error": True, "content": []}]},
        {"role": "user", "content": "plain"},
    ]
    assert messages_errors(messages) == 2


def test_responses_counts_function_call_outputs_that_match() -> None:
    items = [
        {"type": "function_call_output", "call_id": "a", "output": "Error: nope"},
        {"type": "function_call_output", "call_id": "b", "output": "fine"},
        {"type": "function_call_output", "call_id": "c",
         "output": [{"type": "input_text", "text": "Error: parts"}]},
        {"type": "message", "role": "user", "content": "Error: a user"},
    ]
    assert responses_errors(items, ERROR) == 2
    assert responses_errors("a string input", ERROR) == 0


# The decision table of docs/repair.md, row by row.
@pytest.mark.parametrize(("remaining", "repairs", "constrained_from", "ground", "exhausted"), [
    (None, 2, None, False, "best"),
    (10, 2, None, False, "best"),
    (3, 2, None, False, "best"),
    (2, 3, 2, True, "best"),
    (1, 3, 2, True, "withhold"),
    (0, 3, 2, True, "withhold"),
])
def test_the_escalation_table(remaining: int | None, repairs: int,
                              constrained_from: int | None, ground: bool,
                              exhausted: str) -> None:
    policy = policy_for_budget(BASE, remaining)
    assert (policy.max_repairs, policy.constrained_from, policy.ground_entities,
            policy.on_exhausted) == (repairs, constrained_from, ground, exhausted)


def test_plenty_left_is_exactly_the_operators_policy() -> None:
    assert policy_for_budget(BASE, 3) is BASE and policy_for_budget(BASE, None) is BASE


def test_without_a_constrained_mode_nothing_is_constrained_earlier() -> None:
    assert policy_for_budget(GuardPolicy(), 1).constrained_from is None


def test_the_operators_hard_choices_stand() -> None:
    observe = GuardPolicy(repair=False)
    assert policy_for_budget(observe, 1) is observe
    no_reasks = policy_for_budget(GuardPolicy(max_repairs=0), 1)
    assert no_reasks.max_repairs == 0 and no_reasks.on_exhausted == "withhold"
    assert policy_for_budget(GuardPolicy(on_exhausted="error"), 1).on_exhausted == "error"
    assert policy_for_budget(GuardPolicy(on_exhausted="original"), 1).on_exhausted == \
        "withhold"
    capped = policy_for_budget(GuardPolicy(max_repairs=MAX_REPAIRS_CEILING), 2)
    assert capped.max_repairs == MAX_REPAIRS_CEILING


# -- the budget across a reply's parallel calls (issue 22) -----------------------------------

RULES = CallRules(toolset=ToolSetCache().get(TOOLS))
VALID = '{"order_id": "#W1234567", "detail": "full"}'
INVALID = '{"order_id": "#W1234567"}'  # `detail` is required


def parallel(*arguments: str) -> LadderResult:
    """A ladder that gave up on one reply of parallel get_order_details calls."""
    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": "get_order_details", "arguments": a}}
             for i, a in enumerate(arguments)]
    completion = completion_with_message({"role": "assistant", "content": None,
                                          "tool_calls": calls}, "tool_calls")
    first = read_attempt(1, "initial", completion, RULES, False, 0.0)
    return LadderResult([first], "exhausted", ["exhausted"])


def passed_on(result: LadderResult, policy: GuardPolicy) -> list[str]:
    return [c.arguments for c in returned_attempt(result, policy.on_exhausted).reply.tool_calls]


@pytest.mark.parametrize("on_exhausted", ["passthrough", "original"])
def test_no_more_invalid_calls_than_the_budget_can_take_are_passed_on(on_exhausted: str) -> None:
    result = parallel(INVALID, VALID, INVALID, INVALID, VALID)
    policy = GuardPolicy(on_exhausted=on_exhausted)  # type: ignore[arg-type]
    trimmed, after = within_budget(result, policy, 3, RULES)  # 3 left: 2 may fail
    assert passed_on(trimmed, after) == [INVALID, VALID, INVALID, VALID]
    assert OVER_BUDGET_WITHHELD in trimmed.fallbacks
    assert result.attempts == trimmed.attempts[:1]  # the ladder's own result is untouched


def test_with_one_unit_left_the_whole_reply_is_withheld_as_before() -> None:
    """A reply's calls are one plan (docs/repair.md): at one unit left, its valid calls go
    with the invalid ones, as the withhold rule already decided."""
    for arguments in ((INVALID, VALID, INVALID), (INVALID, INVALID)):
        result = parallel(*arguments)
        policy = policy_for_budget(GuardPolicy(), 1)
        assert within_budget(result, policy, 1, RULES) == (result, policy)
        assert passed_on(result, policy) == []


def test_at_two_left_only_one_invalid_call_goes_out() -> None:
    result = parallel(INVALID, INVALID, INVALID)
    policy = policy_for_budget(GuardPolicy(), 2)
    trimmed, after = within_budget(result, policy, 2, RULES)
    assert passed_on(trimmed, after) == [INVALID]


@pytest.mark.parametrize(("remaining", "policy"), [
    (None, GuardPolicy()),  # no budget known
    (5, GuardPolicy()),  # 3 invalid calls, 5 left: the budget can take them
    (2, GuardPolicy(repair=False)),  # observe mode
    (2, GuardPolicy(on_exhausted="error")),  # the operator's error
])
def test_otherwise_the_result_is_left_alone(remaining: int | None, policy: GuardPolicy) -> None:
    result = parallel(INVALID, INVALID, INVALID, VALID)
    assert within_budget(result, policy, remaining, RULES) == (result, policy)
