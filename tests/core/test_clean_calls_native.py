"""The native clean-answer shortcuts (dialects/native_clean.py) against the full reading.

As tests/core/test_clean_calls.py holds chat's: a shortcut may only say "all ok" where the
full reading (the dialect's completion_of, then read_attempt + validate_reply) says so
too, with nothing lifted, fixed or noted; it may decline anything; the answers an agent
gets most (valid calls) must take it. The rules are read from a real native request by
the dialect (its tool_choice and disable_parallel_tool_use included), as the route reads
them. Replies are simulated (tests/fakes/native_replies.py).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from reflexguard.core.attempts import read_attempt
from reflexguard.core.grounding import DEFAULT_PATTERN
from reflexguard.core.model import JsonObject
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules
from reflexguard.dialects.chat_request import GroundingPolicy
from reflexguard.dialects.messages import MESSAGES
from reflexguard.dialects.native import Dialect
from reflexguard.dialects.native_clean import clean_messages_calls, clean_responses_calls
from reflexguard.dialects.reader import dialect_request
from reflexguard.dialects.responses import RESPONSES
from tests.fakes.native_replies import (
    anthropic_call,
    anthropic_message,
    function_call,
    message_item,
    openai_response,
    reasoning_item,
    redacted_block,
    text_block,
    thinking_block,
    tool_use,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

CACHE = ToolSetCache()
OFF = GroundingPolicy()
ON = GroundingPolicy(pattern=re.compile(DEFAULT_PATTERN))
WRITTEN = '[{"name": "cancel_order", "arguments": {"order_id": "#W1"}}]'
CANCEL = {"order_id": "#W1"}

Case = tuple[JsonObject, dict[str, Any], GroundingPolicy]  # reply, request extras, grounding


def rules_of(dialect: Dialect, extra: dict[str, Any], grounding: GroundingPolicy) -> CallRules:
    body = messages_body(**extra) if dialect is MESSAGES else responses_body(**extra)
    rules = dialect_request(body, dialect, CACHE, grounding).chat.rules
    assert rules is not None
    return rules


def full_reading(dialect: Dialect, reply: JsonObject, rules: CallRules,
                 lift: bool) -> tuple[bool, tuple[str, ...]]:
    completion = dialect.completion_of(reply)
    attempt = read_attempt(1, "initial", completion, rules, lift, 0.0)
    valid = attempt.valid and not any(v.internal_events for v in attempt.verdicts)
    names = tuple(call.name for reply in attempt.replies for call in reply.tool_calls)
    return valid and not attempt.changed, names


def call(name: str, arguments: Any, call_id: str = "toolu_1") -> JsonObject:
    return anthropic_message(tool_use(name, arguments, call_id), stop="tool_use")


MESSAGES_CLEAN: dict[str, Case] = {
    "one valid call": (anthropic_call("get_order_details", GOOD), {}, OFF),
    "text beside the call": (anthropic_call("cancel_order", CANCEL, text="Cancelling."), {},
                             OFF),
    "text holding a JSON call beside a real call": (
        anthropic_call("cancel_order", CANCEL, text=WRITTEN), {}, OFF),
    "thinking and redacted thinking first": (anthropic_call(
        "get_order_details", GOOD, thinking=[thinking_block("look it up"), redacted_block()]),
        {}, OFF),
    "two valid calls": (anthropic_message(tool_use("get_order_details", GOOD),
                                          tool_use("cancel_order", CANCEL, "toolu_2"),
                                          stop="tool_use"), {}, OFF),
    "a valid call cut by max_tokens": (anthropic_message(
        tool_use("cancel_order", CANCEL), stop="max_tokens"), {}, OFF),
    "named choice obeyed": (call("cancel_order", CANCEL),
                            {"tool_choice": {"type": "tool", "name": "cancel_order"}}, OFF),
    "any choice obeyed": (call("cancel_order", CANCEL), {"tool_choice": {"type": "any"}},
                          OFF),
    "one call with parallel use off": (call("cancel_order", CANCEL), {"tool_choice": {
        "type": "auto", "disable_parallel_tool_use": True}}, OFF),
}

MESSAGES_DECLINED: dict[str, Case] = {
    "unknown name": (call("get_order_detail", GOOD), {}, OFF),
    "name not a string": (call(7, GOOD), {}, OFF),  # type: ignore[arg-type]
    "input a list": (call("cancel_order", [CANCEL]), {}, OFF),
    "input a JSON string": (call("cancel_order", '{"order_id": "#W1"}'), {}, OFF),
    "input missing": (anthropic_message({"type": "tool_use", "id": "t", "name": "cancel_order"},
                                        stop="tool_use"), {}, OFF),
    "schema violation": (call("get_order_details", {"order_id": "1"}), {}, OFF),
    "enum violation": (call("get_order_details", {"order_id": "1", "detail": "all"}), {}, OFF),
    "one bad call of two": (anthropic_message(tool_use("get_order_details", GOOD),
                                              tool_use("nope", CANCEL, "toolu_2"),
                                              stop="tool_use"), {}, OFF),
    "choice none": (call("cancel_order", CANCEL), {"tool_choice": {"type": "none"}}, OFF),
    "named choice broken": (call("get_order_details", GOOD),
                            {"tool_choice": {"type": "tool", "name": "cancel_order"}}, OFF),
    "two calls with parallel use off": (
        anthropic_message(tool_use("cancel_order", CANCEL),
                          tool_use("cancel_order", {"order_id": "#W2"}, "toolu_2"),
                          stop="tool_use"),
        {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, OFF),
    "text answer": (anthropic_message(text_block("It ships tomorrow.")), {}, OFF),
    "call written as text": (anthropic_message(text_block(WRITTEN)), {}, OFF),
    "refusal": (anthropic_message(text_block("I can't help with that."), stop="refusal"), {},
                OFF),
    "thinking only": (anthropic_message(thinking_block("hmm")), {}, OFF),
    "empty content": (anthropic_message(), {}, OFF),
    "content a string": ({**anthropic_message(), "content": "hello"}, {}, OFF),
    "content missing": ({k: v for k, v in call("cancel_order", CANCEL).items()
                         if k != "content"}, {}, OFF),
    "a block not an object": ({**call("cancel_order", CANCEL),
                               "content": ["x", tool_use("cancel_order", CANCEL)]}, {}, OFF),
    "server tool use beside a valid call": (anthropic_message(
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
         "input": {"query": "order"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        tool_use("cancel_order", CANCEL), stop="tool_use"), {}, OFF),
    "grounding on": (call("cancel_order", {"order_id": "#W7777777"}), {}, ON),
}


def fc(name: str, arguments: Any, call_id: str = "call_1") -> JsonObject:
    return function_call(name, arguments, call_id)


def incomplete(*items: JsonObject) -> JsonObject:
    return {**openai_response(*items), "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}}


REFUSAL = {"type": "message", "id": "msg_r", "status": "completed", "role": "assistant",
           "content": [{"type": "refusal", "refusal": "I can't help with that."}]}

RESPONSES_CLEAN: dict[str, Case] = {
    "one valid call": (openai_response(fc("get_order_details", GOOD)), {}, OFF),
    "a message beside the call": (openai_response(message_item("Cancelling."),
                                                  fc("cancel_order", CANCEL)), {}, OFF),
    "a message holding a JSON call beside a real call": (
        openai_response(message_item(WRITTEN), fc("cancel_order", CANCEL)), {}, OFF),
    "a reasoning item first": (openai_response(reasoning_item("look it up"),
                                               fc("get_order_details", GOOD)), {}, OFF),
    "a refusal part beside a call": (openai_response(REFUSAL, fc("cancel_order", CANCEL)),
                                     {}, OFF),
    "two valid calls": (openai_response(fc("get_order_details", GOOD),
                                        fc("cancel_order", CANCEL, "call_2")), {}, OFF),
    "a valid call in an incomplete response": (incomplete(fc("cancel_order", CANCEL)), {},
                                               OFF),
    "named choice obeyed": (openai_response(fc("cancel_order", CANCEL)),
                            {"tool_choice": {"type": "function", "name": "cancel_order"}}, OFF),
    "required choice obeyed": (openai_response(fc("cancel_order", CANCEL)),
                               {"tool_choice": "required"}, OFF),
}

RESPONSES_DECLINED: dict[str, Case] = {
    "unknown name": (openai_response(fc("get_order_detail", GOOD)), {}, OFF),
    "name not a string": (openai_response({**fc("cancel_order", CANCEL), "name": None}), {},
                          OFF),
    "broken arguments string": (openai_response(fc("cancel_order", '{"order_id": "#W1"')), {},
                                OFF),
    "arguments not an object": (openai_response(fc("cancel_order", "[1]")), {}, OFF),
    "arguments an object, not a string": (
        openai_response({**fc("cancel_order", CANCEL), "arguments": CANCEL}), {}, OFF),
    "arguments missing": (openai_response({k: v for k, v in fc("cancel_order", CANCEL).items()
                                           if k != "arguments"}), {}, OFF),
    "schema violation": (openai_response(fc("get_order_details", {"order_id": "1"})), {}, OFF),
    "one bad call of two": (openai_response(fc("get_order_details", GOOD),
                                            fc("nope", CANCEL, "call_2")), {}, OFF),
    "choice none": (openai_response(fc("cancel_order", CANCEL)), {"tool_choice": "none"}, OFF),
    "named choice broken": (openai_response(fc("get_order_details", GOOD)),
                            {"tool_choice": {"type": "function", "name": "cancel_order"}}, OFF),
    "two calls with parallel calls off": (
        openai_response(fc("cancel_order", CANCEL), fc("cancel_order", CANCEL, "call_2")),
        {"parallel_tool_calls": False}, OFF),
    "text answer": (openai_response(message_item("It ships tomorrow.")), {}, OFF),
    "call written as text": (openai_response(message_item(WRITTEN)), {}, OFF),
    "refusal": (openai_response(REFUSAL), {}, OFF),
    "reasoning only": (openai_response(reasoning_item("hmm")), {}, OFF),
    "incomplete with no call": (incomplete(reasoning_item("hmm")), {}, OFF),
    "empty output": (openai_response(), {}, OFF),
    "output not a list": ({**openai_response(), "output": {"0": fc("cancel_order", CANCEL)}},
                          {}, OFF),
    "an item not an object": ({**openai_response(), "output": [
        "x", fc("cancel_order", CANCEL)]}, {}, OFF),
    "message content not a list": (openai_response(
        {**message_item("x"), "content": "text"}, fc("cancel_order", CANCEL)), {}, OFF),
    "a built-in tool's call beside a valid call": (openai_response(
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        fc("cancel_order", CANCEL)), {}, OFF),
    "a custom tool call": (openai_response(
        {"type": "custom_tool_call", "call_id": "c", "name": "cancel_order", "input": "x"}),
        {}, OFF),
    "grounding on": (openai_response(fc("cancel_order", {"order_id": "#W7777777"})), {}, ON),
}

CORPUS = {
    "messages": (MESSAGES, clean_messages_calls, MESSAGES_CLEAN, MESSAGES_DECLINED),
    "responses": (RESPONSES, clean_responses_calls, RESPONSES_CLEAN, RESPONSES_DECLINED),
}


def cases(kind: str) -> list[tuple[str, str]]:
    return [(name, case) for name, (_, _, clean, declined) in CORPUS.items()
            for case in (clean if kind == "clean" else declined)]


def lookup(dialect: str, case: str) -> tuple[Dialect, Any, JsonObject, CallRules]:
    spec, shortcut, clean, declined = CORPUS[dialect]
    reply, extra, grounding = {**clean, **declined}[case]
    return spec, shortcut, reply, rules_of(spec, extra, grounding)


@pytest.mark.parametrize(("dialect", "case"), cases("clean"))
@pytest.mark.parametrize("lift", [False, True])
def test_valid_calls_take_the_shortcut_with_the_full_readings_names(
        dialect: str, case: str, lift: bool) -> None:
    spec, shortcut, reply, rules = lookup(dialect, case)
    valid, names = full_reading(spec, reply, rules, lift)
    assert valid and names
    assert shortcut(reply, rules) == names


@pytest.mark.parametrize(("dialect", "case"), cases("declined"))
def test_the_shortcut_declines_what_the_full_reading_flags_or_must_read(
        dialect: str, case: str) -> None:
    _, shortcut, reply, rules = lookup(dialect, case)
    assert shortcut(reply, rules) is None


@pytest.mark.parametrize(("dialect", "case"), cases("clean") + cases("declined"))
@pytest.mark.parametrize("lift", [False, True])
def test_the_shortcut_never_says_clean_where_the_full_reading_does_not(
        dialect: str, case: str, lift: bool) -> None:
    spec, shortcut, reply, rules = lookup(dialect, case)
    if shortcut(reply, rules) is not None:
        assert full_reading(spec, reply, rules, lift)[0]


@pytest.mark.parametrize(("dialect", "case"), [
    ("messages", "two valid calls"), ("responses", "a reasoning item first")])
def test_the_shortcut_leaves_the_reply_untouched(dialect: str, case: str) -> None:
    _, shortcut, reply, rules = lookup(dialect, case)
    before = copy.deepcopy(reply)
    assert shortcut(reply, rules) is not None
    assert reply == before


def passes_in_full(dialect: str, case: str) -> bool:
    spec, _, reply, rules = lookup(dialect, case)
    return full_reading(spec, reply, rules, False)[0]


def test_the_declines_the_full_reading_would_pass_are_few_and_named() -> None:
    """Declining is always safe, but each decline the full reading would pass costs the
    full ladder: these are the only ones, declined on purpose. A text answer is read in
    full by chat's shortcut too (the text is searched for calls written in it); the rest
    are rare on the wire, and what the full reading skips there (a built-in tool's use, a
    stray non-object) is not the shortcut's to judge."""
    assert {(d, c) for d, c in cases("declined") if passes_in_full(d, c)} == {
        ("messages", "text answer"),
        ("messages", "refusal"),
        ("responses", "text answer"),
        ("messages", "server tool use beside a valid call"),
        ("messages", "a block not an object"),
        ("responses", "arguments an object, not a string"),
        ("responses", "a built-in tool's call beside a valid call"),
        ("responses", "an item not an object"),
        ("responses", "message content not a list"),
    }


def test_a_validator_fault_is_left_to_the_full_reading() -> None:
    class Broken:
        def is_valid(self, _: object) -> bool:
            raise RuntimeError("validator fault")

    for spec, shortcut, clean, _ in CORPUS.values():
        reply, extra, grounding = clean["one valid call"]
        rules = rules_of(spec, extra, grounding)
        toolset = rules.toolset
        name = "get_order_details"
        broken = type(toolset.specs[name])(name, toolset.specs[name].parameters, Broken())
        faulty = type(toolset)(toolset.digest, {**toolset.specs, name: broken},
                               toolset.schema_text, toolset.depth)
        assert shortcut(reply, CallRules(faulty)) is None
