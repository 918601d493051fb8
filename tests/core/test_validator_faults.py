"""A fault inside a check is never the verdict "valid" (issue 30, item 1): a lone UTF-16
surrogate in the arguments is the model's `malformed_args`, re-asked like broken JSON; a
fault of the validator's own is `check_fault`, never re-asked for its own sake, never
withheld, and counted. Every `except` on the validation path is held to that here."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflexguard.core.channels import Channel
from reflexguard.core.choice import returned_attempt, withholds
from reflexguard.core.fixes import FixPolicy, apply_fixes
from reflexguard.core.ladder import GuardPolicy, run_ladder
from reflexguard.core.model import Reply, ToolCall
from reflexguard.core.repair import reask_body
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, accepts_json, clean_tool_calls, validate_reply
from tests.conftest import chat_body
from tests.core.test_ladder import ListSend, first
from tests.fakes.fake_upstream import tool_call_completion

NEEDS_X = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "required": ["x"], "properties": {"x": {"type": "number"}}}}}
RULES = CallRules(toolset=ToolSetCache().get([NEEDS_X]))
BACKTRACKING = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"x": {"type": "string", "pattern": r"^(\w+\s?)*\1$"}}}}}
FAULTY = CallRules(toolset=ToolSetCache().get([BACKTRACKING]))
STUCK = '{"x": "' + "a" * 200 + '!"}'  # past the pattern's backtracking limit
# Escapes JSON text may hold: lone high and low surrogates, reversed and doubled halves.
LONE = ["\\ud800", "\\udfff", "\\udc00\\ud800", "\\ud83d", "\\ud83d\\ud83d", "a\\ud800b"]


def verdict(arguments: str, rules: CallRules = RULES) -> Any:
    reply = Reply(tool_calls=(ToolCall(id="c", name="f", arguments=arguments),))
    return validate_reply(reply, rules).calls[0]


@pytest.mark.parametrize("escape", LONE)
@pytest.mark.parametrize("template", ['{{"y": "{}"}}', '{{"x": 1, "note": "{}"}}',
                                      '{{"{}": 1}}', '{{"x": ["{}"]}}'])
def test_a_lone_surrogate_is_malformed_arguments_never_ok(escape: str, template: str) -> None:
    call = verdict(template.format(escape))
    assert call.channel is Channel.MALFORMED_ARGS, call
    assert "surrogate" in call.detail


def test_a_surrogate_pair_is_text_and_judged_by_the_schema() -> None:
    assert verdict('{"x": 1, "note": "\\ud83d\\ude00"}').channel is Channel.OK  # an emoji
    assert verdict('{"y": "\\ud83d\\ude00"}').channel is Channel.SCHEMA_VIOLATION


def test_the_clean_answer_shortcuts_never_pass_a_lone_surrogate() -> None:
    spec = RULES.toolset.specs["f"]
    assert not accepts_json(spec, '{"x": 1, "y": "\\ud800"}')
    completion = tool_call_completion("f", '{"y": "\\ud800"}')
    assert clean_tool_calls(completion, RULES) is None  # "read it in full"
    assert not validate_reply(first(completion, RULES).reply, RULES).valid


async def test_a_lone_surrogate_is_re_asked_and_the_re_ask_is_sendable() -> None:
    send = ListSend(tool_call_completion("f", {"x": 2}))
    result = await run_ladder(chat_body(), first(tool_call_completion("f", '{"y": "\\ud800"}'),
                                                 RULES), RULES, GuardPolicy(), send,
                              lambda _: None)
    assert result.outcome == "fixed_by_reask" and len(send.bodies) == 1
    json.dumps(send.bodies[0], ensure_ascii=False).encode("utf-8")  # no raw surrogate in it


def test_a_raw_surrogate_in_the_arguments_is_quoted_back_as_an_escape() -> None:
    reply = Reply(tool_calls=(ToolCall(id="c", name="f", arguments='{"y": "\ud800"}'),))
    body = reask_body(chat_body(), reply, validate_reply(reply, RULES), RULES.toolset)
    json.dumps(body, ensure_ascii=False).encode("utf-8")
    assert "\\ud800" in json.dumps(body)


@given(text=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
                   max_size=20),
       escape=st.sampled_from(LONE), where=st.integers(0, 20))
@settings(max_examples=300, deadline=None)
def test_no_string_with_a_lone_surrogate_passes_as_valid(text: str, escape: str,
                                                         where: int) -> None:
    """Any text, its own characters raw (so no escape of its own can pair with ours), a
    lone surrogate's escape put between two of its characters."""
    marked = text[:where] + "\x00" + text[where:]
    written = json.dumps(marked, ensure_ascii=False).replace("\\u0000", escape)
    arguments = '{"x": 1, "note": ' + written + '}'
    assert verdict(arguments).channel is Channel.MALFORMED_ARGS


def test_a_validator_fault_is_check_fault_never_ok() -> None:
    call = verdict(STUCK, FAULTY)
    assert call.channel is Channel.CHECK_FAULT and call.note == "validator_error"
    assert not validate_reply(Reply(tool_calls=(ToolCall(id="c", name="f", arguments=STUCK),)),
                              FAULTY).valid


async def test_a_check_fault_alone_is_not_re_asked_and_goes_on_as_written() -> None:
    send = ListSend()  # any re-ask would pop from an empty list
    completion = tool_call_completion("f", STUCK)
    result = await run_ladder(chat_body(), first(completion, FAULTY), FAULTY, GuardPolicy(),
                              send, lambda _: None)
    assert result.outcome == "not_repaired" and send.bodies == []
    assert "check_fault_not_repaired" in result.fallbacks
    assert returned_attempt(result, "best").reply.tool_calls[0].arguments == STUCK
    # Withholding a call we could not judge would be worse than no guard.
    assert not withholds(result, "withhold")
    assert returned_attempt(result, "withhold").reply.tool_calls


async def test_a_check_fault_beside_a_real_error_is_re_asked_for_the_error() -> None:
    tools = [BACKTRACKING, {"type": "function", "function": {"name": "g", "parameters": {
        "type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}}}]
    rules = CallRules(toolset=ToolSetCache().get(tools))
    bad = tool_call_completion("f", STUCK)
    bad["choices"][0]["message"]["tool_calls"].append(
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}})
    send = ListSend(tool_call_completion("g", {"n": 1}))
    result = await run_ladder(chat_body(), first(bad, rules), rules, GuardPolicy(), send,
                              lambda _: None)
    assert len(send.bodies) == 1 and result.outcome == "fixed_by_reask"
    tool_messages = [m["content"] for m in send.bodies[0]["messages"] if m["role"] == "tool"]
    assert tool_messages[0].startswith("Not executed")  # no error of the model's invented
    assert tool_messages[1].startswith("Error:")


def test_a_json_repair_guess_that_keeps_a_lone_surrogate_is_no_fix() -> None:
    """Found by the fuzz suite (profile b, json_repair on): json-repair reads the broken
    text, keeps the surrogate, and writing its guess raised: a 500. No fix instead; the
    call stays malformed and is re-asked."""
    reply = Reply(tool_calls=(ToolCall(id="c", name="f", arguments='{"x": 1, "y": "\\ud800'),))
    fixed, applied = apply_fixes(reply, validate_reply(reply, RULES), RULES.toolset,
                                 FixPolicy(json_repair=True))
    assert applied == [] and fixed is reply
