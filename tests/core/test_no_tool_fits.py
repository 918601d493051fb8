"""No tool fits (core/fit.py): a call to a tool that is not offered, whose arguments no
offered tool takes, is not forced into a call of an unrelated tool (issue 20, BFCL
irrelevance), while a near miss (the intended tool's parameter names) is repaired as before."""

from __future__ import annotations

import json
from typing import Any

from reflexguard.core.attempts import Attempt
from reflexguard.core.channels import Channel
from reflexguard.core.choice import agent_completion
from reflexguard.core.feedback import NO_FIT_INSTRUCTION
from reflexguard.core.fit import argument_keys, no_tool_fits, offered_parameters
from reflexguard.core.ladder import MAX_REASK_REPLY_CHARS, GuardPolicy, run_ladder
from reflexguard.core.model import CallVerdict, Reply, ToolCall, ToolChoice, Verdict
from reflexguard.core.repair import ABSTAIN_SCHEMA, call_feedback, constrain, reask_body
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules
from reflexguard.dialects import messages, responses
from tests.conftest import TOOLS, chat_body
from tests.core.test_ladder import RULES, ListSend, first, ladder
from tests.fakes.fake_upstream import text_completion, tool_call_completion
from tests.http.dialect_fixtures import anthropic_tools, messages_body, responses_body

TOOLSET = ToolSetCache().get(TOOLS)
# BFCL irrelevance_201 at Q2_K, in miniature: an invented tool, arguments of its own.
ICE_CREAM = {"flavour": "vanilla", "store": "nearest"}
NEAR_MISS = {"order_id": "#W1234567", "detail": "full"}  # get_order_details's own keys


def unknown(*calls: tuple[str, str]) -> tuple[Reply, Verdict]:
    reply = Reply(tool_calls=tuple(ToolCall(id=f"c{i}", name=name, arguments=arguments)
                                   for i, (name, arguments) in enumerate(calls)))
    verdict = Verdict(calls=tuple(CallVerdict(channel=Channel.UNKNOWN_TOOL, index=i, name=name)
                                  for i, (name, _) in enumerate(calls)))
    return reply, verdict


def test_the_offered_parameters_are_every_tools_top_level_names() -> None:
    assert offered_parameters(TOOLSET) == {"order_id", "detail", "reason"}


def test_an_invented_tool_with_its_own_arguments_fits_nothing() -> None:
    assert no_tool_fits(*unknown(("Ice Cream Store", json.dumps(ICE_CREAM))), TOOLSET)


def test_a_near_miss_that_uses_an_offered_parameter_still_fits() -> None:
    assert not no_tool_fits(*unknown(("get_order_detail", json.dumps(NEAR_MISS))), TOOLSET)
    # One shared key is enough evidence of the tool it meant.
    one_key = json.dumps({"order_id": "#W1", "flavour": "x"})
    assert not no_tool_fits(*unknown(("lookup", one_key)), TOOLSET)


def test_empty_or_keyless_arguments_are_no_evidence() -> None:
    for arguments in ("{}", "[1, 2]", "", "not json at all", '{"flavour'):
        assert not no_tool_fits(*unknown(("Ice Cream Store", arguments)), TOOLSET), arguments


def test_broken_json_is_read_for_its_keys() -> None:
    """BFCL irrelevance_82 and _194 at Q2_K: JavaScript comments, a missing brace."""
    commented = '{\n  "symbol": "AAPL", // the stock\n  "limit": 5 // how many\n}'
    assert argument_keys(commented) == {"symbol", "limit"}
    assert no_tool_fits(*unknown(("retrieve_stock_news", commented)), TOOLSET)
    cut_near_miss = '{"order_id": "#W1", "detail": "full"'
    assert not no_tool_fits(*unknown(("get_order", cut_near_miss)), TOOLSET)


def test_a_json_schema_echoed_as_arguments_is_read_for_its_properties() -> None:
    """BFCL irrelevance_201 at Q2_K: `Ice Cream Store` with a schema for arguments; an
    offered tool with a `type` parameter must not make the keyword look like a match."""
    echo = '{"type": "object", "properties": {"location": {"type": "string"}, "price": {}'
    assert argument_keys(echo) == {"location", "price"}
    typed = ToolSetCache().get([*TOOLS, {"type": "function", "function": {
        "name": "game_guide", "parameters": {"type": "object", "properties": {
            "game_name": {"type": "string"}, "type": {"type": "string"}}}}}])
    assert no_tool_fits(*unknown(("Ice Cream Store", echo)), typed)
    meant = '{"type": "object", "properties": {"order_id": "#W1"}'  # cut off, like the echoes
    assert argument_keys(meant) == {"order_id"}
    assert not no_tool_fits(*unknown(("order lookup", meant)), TOOLSET)


def test_keys_are_read_in_one_pass_at_the_largest_reasked_size() -> None:
    """The ladder re-asks replies up to 256 Ki characters of arguments: a hostile one of
    that size, all quotes and colons, is read whole, and an unterminated key of any length
    never matches past the 200-character key bound."""
    hostile = '{"' + '"a": 1, "' * (MAX_REASK_REPLY_CHARS // 10)
    assert argument_keys(hostile) == {"a"}
    assert argument_keys('{"' + "k" * MAX_REASK_REPLY_CHARS + '": 1') == frozenset()


def test_every_call_of_the_reply_must_reach_outside() -> None:
    reply, _ = unknown(("Ice Cream Store", json.dumps(ICE_CREAM)),
                       ("get_order_details", json.dumps(NEAR_MISS)))
    mixed = Verdict(calls=(CallVerdict(channel=Channel.UNKNOWN_TOOL, index=0, name="x"),
                           CallVerdict(channel=Channel.OK, index=1, name="get_order_details")))
    assert not no_tool_fits(reply, mixed, TOOLSET)
    schema = Verdict(calls=(CallVerdict(channel=Channel.SCHEMA_VIOLATION, index=0, name="x"),))
    assert not no_tool_fits(unknown(("x", json.dumps(ICE_CREAM)))[0], schema, TOOLSET)
    assert not no_tool_fits(Reply(content="text"), Verdict(), TOOLSET)


def test_the_re_ask_allows_an_answer_without_a_tool_only_when_nothing_fits() -> None:
    [(_, said)] = call_feedback(*unknown(("Ice Cream Store", json.dumps(ICE_CREAM))), TOOLSET)
    assert NO_FIT_INSTRUCTION in said and "Call one of these" not in said
    [(_, near)] = call_feedback(*unknown(("get_order_detail", json.dumps(NEAR_MISS))), TOOLSET)
    assert NO_FIT_INSTRUCTION not in near and "Call one of these" in near


def test_the_constrained_attempt_may_only_answer_in_text_when_nothing_fits() -> None:
    reply, verdict = unknown(("Ice Cream Store", json.dumps(ICE_CREAM)))
    body = reask_body(chat_body(), reply, verdict, TOOLSET)
    json_mode = constrain(body, "response_format", reply, verdict, TOOLSET)
    assert json_mode["response_format"] == {"type": "json_object", "schema": ABSTAIN_SCHEMA}
    structured = constrain(body, "structured_outputs", reply, verdict, TOOLSET)
    assert structured["structured_outputs"] == {"json": ABSTAIN_SCHEMA}
    assert constrain(body, "tool_choice", reply, verdict, TOOLSET)["tool_choice"] == "none"
    assert "response_format" not in body and "tool_choice" not in body  # never mutated


def test_a_client_that_requires_a_call_still_gets_one() -> None:
    reply, verdict = unknown(("Ice Cream Store", json.dumps(ICE_CREAM)))
    body = reask_body(chat_body(tool_choice="required"), reply, verdict, TOOLSET)
    schema = constrain(body, "response_format", reply, verdict, TOOLSET)["response_format"]
    assert ABSTAIN_SCHEMA not in schema["schema"].get("anyOf", [schema["schema"]])
    assert constrain(body, "tool_choice", reply, verdict, TOOLSET)["tool_choice"] != "none"


def test_a_near_miss_is_constrained_to_its_tool_as_before() -> None:
    reply, verdict = unknown(("get_order_detail", json.dumps(NEAR_MISS)))
    body = reask_body(chat_body(), reply, verdict, TOOLSET)
    forced = constrain(body, "tool_choice", reply, verdict, TOOLSET)
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "get_order_details"}}


def _native(*calls: tuple[str, dict[str, Any]]) -> tuple[Reply, Verdict]:
    return unknown(*((name, json.dumps(arguments)) for name, arguments in calls))


def test_messages_and_responses_answer_in_text_when_nothing_fits() -> None:
    native_tools = ToolSetCache().get(messages.chat_tools(anthropic_tools()))
    outside = _native(("Ice Cream Store", ICE_CREAM))
    near = _native(("get_order_detail", {"order_id": "#W1"}))
    assert messages.constrain(messages_body(), "response_format", *outside,
                              native_tools)["tool_choice"] == {"type": "none"}
    assert messages.constrain(messages_body(), "response_format", *near,
                              native_tools)["tool_choice"]["type"] == "tool"
    forced = messages_body(tool_choice={"type": "any"})
    assert messages.constrain(forced, "response_format", *outside,
                              native_tools)["tool_choice"]["type"] != "none"
    assert responses.constrain(responses_body(), "tool_choice", *outside,
                               native_tools)["tool_choice"] == "none"
    required = responses_body(tool_choice="required")
    assert responses.constrain(required, "tool_choice", *outside,
                               native_tools)["tool_choice"] != "none"


async def test_the_ladder_returns_the_models_text_and_counts_the_decision() -> None:
    invented = tool_call_completion("Ice Cream Store", ICE_CREAM)
    again = tool_call_completion("Ice Cream Shop", ICE_CREAM)
    said = text_completion(json.dumps({"answer": "No tool here can find an ice cream store."}))
    send = ListSend(again, said)
    result, seen = await ladder(invented, send, constrained="response_format", max_repairs=2)
    assert [a.kind for a in seen] == ["initial", "reask", "constrained"]
    assert send.bodies[1]["response_format"]["schema"] == ABSTAIN_SCHEMA
    assert NO_FIT_INSTRUCTION in send.bodies[0]["messages"][-1]["content"]
    assert result.outcome == "fixed_by_constrained" and "no_tool_fits" in result.fallbacks
    answer = agent_completion(result)["choices"][0]["message"]
    assert answer["content"] == "No tool here can find an ice cream store."
    assert not answer.get("tool_calls")


async def test_a_near_miss_ladder_is_unchanged() -> None:
    near = tool_call_completion("get_order_detail", NEAR_MISS)
    fixed = tool_call_completion("get_order_details", NEAR_MISS)
    send = ListSend(tool_call_completion("get_order_detailz", NEAR_MISS), fixed)
    result, _ = await ladder(near, send, constrained="response_format", max_repairs=2)
    assert "no_tool_fits" not in result.fallbacks
    assert ABSTAIN_SCHEMA in send.bodies[1]["response_format"]["schema"]["anyOf"]
    assert len(send.bodies[1]["response_format"]["schema"]["anyOf"]) == 2


async def test_the_first_answer_stays_the_evidence_when_a_re_ask_then_calls_a_tool() -> None:
    """BFCL irrelevance_201 at Q2_K: the re-ask answered "call one of these" with an
    offered tool and wrong arguments; the constrained attempt then forced that call."""
    invented = tool_call_completion("Ice Cream Store", ICE_CREAM)
    pushed = tool_call_completion("cancel_order", {"reason": "ice cream"})  # no order_id
    said = text_completion(json.dumps({"answer": "I cannot look up ice cream stores."}))
    send = ListSend(pushed, said)
    result, seen = await ladder(invented, send, constrained="response_format", max_repairs=2)
    assert [a.kind for a in seen] == ["initial", "reask", "constrained"]
    assert send.bodies[1]["response_format"]["schema"] == ABSTAIN_SCHEMA
    assert result.final.reply.content == "I cannot look up ice cream stores."
    assert result.fallbacks.count("no_tool_fits") == 1


async def test_a_client_that_requires_a_call_is_forced_to_the_latest_tool() -> None:
    invented = tool_call_completion("Ice Cream Store", ICE_CREAM)
    pushed = tool_call_completion("cancel_order", {"reason": "ice cream"})
    fixed = tool_call_completion("cancel_order", {"order_id": "#W1", "reason": "x"})
    send = ListSend(pushed, fixed)
    seen: list[Attempt] = []
    rules = CallRules(toolset=RULES.toolset, tool_choice=ToolChoice(mode="required"))
    result = await run_ladder(chat_body(tool_choice="required"), first(invented, rules), rules,
                              GuardPolicy(constrained="tool_choice", max_repairs=2), send,
                              seen.append)
    assert send.bodies[1]["tool_choice"] == {"type": "function",
                                             "function": {"name": "cancel_order"}}
    assert result.outcome == "fixed_by_constrained"
