"""The error budget: reading spent failures from each wire format, and the escalation."""

from __future__ import annotations

import re

import pytest

from reflexguard.core.budget import (
    DEFAULT_ERROR_PATTERN,
    Budget,
    chat_errors,
    messages_errors,
    parse_budget,
    policy_for_budget,
    responses_errors,
)
from reflexguard.core.errors import BadRequest
from reflexguard.core.ladder import MAX_REPAIRS_CEILING, GuardPolicy

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
    (None, 2, None, False, "passthrough"),
    (10, 2, None, False, "passthrough"),
    (3, 2, None, False, "passthrough"),
    (2, 3, 2, True, "passthrough"),
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
