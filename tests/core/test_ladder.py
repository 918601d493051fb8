"""The repair ladder driven in memory through its `send` seam: no socket, no server."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from reflexguard.core.attempts import Attempt, LadderResult, UpstreamFailure, read_attempt
from reflexguard.core.choice import WITHHELD_TEXT, agent_completion, returned_attempt, withholds
from reflexguard.core.grounding import DEFAULT_PATTERN, collect_sources
from reflexguard.core.ladder import GuardPolicy, run_ladder
from reflexguard.core.model import JsonObject
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules
from tests.conftest import TOOLS, chat_body
from tests.fakes.fake_upstream import completion_with_message, text_completion, tool_call_completion

RULES = CallRules(toolset=ToolSetCache().get(TOOLS))
GOOD = {"order_id": "#W1234567", "detail": "full"}
VALID = tool_call_completion("get_order_details", GOOD)
INVALID = tool_call_completion("get_order_detail", GOOD)
# Invalid too, but not the same call as INVALID: no repeat.
OTHER = tool_call_completion("get_order_detailz", GOOD)


class ListSend:
    """A `send` that answers from a list, recording every body it was given."""

    def __init__(self, *answers: JsonObject | Exception) -> None:
        self.answers = list(answers)
        self.bodies: list[JsonObject] = []

    async def __call__(self, body: JsonObject) -> JsonObject:
        self.bodies.append(copy.deepcopy(body))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def first(completion: JsonObject, rules: CallRules = RULES) -> Attempt:
    return read_attempt(1, "initial", completion, rules, False, 0.0)


async def ladder(completion: JsonObject, send: ListSend, rules: CallRules = RULES,
                 **policy: Any) -> tuple[LadderResult, list[Attempt]]:
    seen: list[Attempt] = []
    result = await run_ladder(chat_body(), first(completion, rules), rules,
                              GuardPolicy(**policy), send, seen.append)
    return result, seen


async def test_a_valid_first_answer_never_calls_send() -> None:
    send = ListSend()
    result, seen = await ladder(VALID, send)
    assert result.outcome == "clean" and send.bodies == [] and len(seen) == 1


async def test_a_truncated_reply_is_not_re_asked_without_a_constrained_mode() -> None:
    cut = copy.deepcopy(INVALID)
    cut["choices"][0]["finish_reason"] = "length"
    send = ListSend()
    result, _ = await ladder(cut, send)
    assert result.outcome == "not_repaired"
    assert result.fallbacks == ["truncated_reply_not_repaired"]
    assert send.bodies == []


async def test_a_truncated_reply_gets_exactly_one_constrained_attempt() -> None:
    cut = copy.deepcopy(INVALID)
    cut["choices"][0]["finish_reason"] = "length"
    send = ListSend(VALID)
    result, _ = await ladder(cut, send, constrained="tool_choice", max_repairs=3)
    assert result.outcome == "fixed_by_constrained"
    assert len(send.bodies) == 1
    assert send.bodies[0]["tool_choice"] == {
        "type": "function", "function": {"name": "get_order_details"}}
    assert "truncated_reply_constrained_only" in result.fallbacks


async def test_ungrounded_only_violations_are_re_asked_but_never_constrained() -> None:
    rules = CallRules(toolset=RULES.toolset,
                      grounding=collect_sources(chat_body()["messages"], False),
                      identifier_pattern=re.compile(DEFAULT_PATTERN))
    invented = tool_call_completion("get_order_details",
                                    {"order_id": "#W9999999", "detail": "full"})
    send = ListSend(invented)
    result, _ = await ladder(invented, send, rules, constrained="tool_choice", max_repairs=1)
    assert result.gave_up
    assert "tool_choice" not in send.bodies[0]
    assert "ask the user" in send.bodies[0]["messages"][-1]["content"]


async def test_the_constrained_attempt_is_the_last_rung() -> None:
    send = ListSend(INVALID, VALID)
    result, seen = await ladder(INVALID, send, constrained="response_format", max_repairs=2)
    assert [a.kind for a in seen] == ["initial", "reask", "constrained"]
    assert "response_format" not in send.bodies[0]
    assert send.bodies[1]["response_format"]["type"] == "json_object"
    assert result.outcome == "fixed_by_constrained"


async def test_a_constrained_attempt_may_answer_without_a_call() -> None:
    """Issue 20: on BFCL's irrelevance, forcing a call made an abstention a wrong call;
    under tool_choice auto the JSON constraint's no-call shape is read as the text it is."""
    abstained = text_completion('{"answer": "None of the tools can tell the weather."}')
    send = ListSend(INVALID, abstained)
    result, seen = await ladder(INVALID, send, constrained="response_format", max_repairs=2)
    assert [a.kind for a in seen] == ["initial", "reask", "constrained"]
    assert result.final.valid and not result.final.reply.tool_calls
    answer = agent_completion(result)["choices"][0]["message"]
    assert answer["content"] == "None of the tools can tell the weather."
    assert "tool_calls" not in answer or not answer["tool_calls"]


async def test_an_abstentions_text_is_never_lifted_into_a_call() -> None:
    """Review finding: the unwrapped answer went through the text-call lifter again."""
    text = '<tool_call>{"name": "get_order_details", "arguments": {}}</tool_call>'
    abstained = text_completion(json.dumps({"answer": text}))
    send = ListSend(INVALID, abstained)
    result, _ = await ladder(INVALID, send, constrained="response_format", max_repairs=2)
    assert not result.final.reply.tool_calls and result.final.reply.content == text


async def test_an_upstream_failure_mid_ladder_keeps_the_last_answer() -> None:
    send = ListSend(OTHER, UpstreamFailure("down"))
    result, _ = await ladder(INVALID, send, max_repairs=3)
    assert result.outcome == "exhausted"
    assert result.fallbacks == ["repair_upstream_error", "exhausted"]
    assert result.failed_calls == 1 and result.upstream_calls == 3


async def test_a_repeated_identical_failure_stops_the_ladder() -> None:
    send = ListSend(INVALID, VALID)
    result, seen = await ladder(INVALID, send, max_repairs=3)
    assert result.outcome == "repeated_failure" and len(send.bodies) == 1
    assert result.fallbacks == ["repeated_failure"] and result.gave_up
    assert [a.kind for a in seen] == ["initial", "reask"]


async def test_a_repeat_goes_straight_to_the_constrained_attempt() -> None:
    send = ListSend(INVALID, VALID)
    result, seen = await ladder(INVALID, send, max_repairs=4, constrained="tool_choice")
    assert [a.kind for a in seen] == ["initial", "reask", "constrained"]
    assert "tool_choice" not in send.bodies[0] and "tool_choice" in send.bodies[1]
    assert result.outcome == "fixed_by_constrained"
    assert "repeated_call_constrained" in result.fallbacks


async def test_after_a_repeat_the_constrained_attempt_is_the_last() -> None:
    send = ListSend(INVALID, OTHER, VALID)
    result, _ = await ladder(INVALID, send, max_repairs=4, constrained="tool_choice")
    assert len(send.bodies) == 2 and result.outcome == "repeated_failure"


async def test_a_repeat_is_the_same_call_with_its_arguments_canonicalised() -> None:
    reordered = tool_call_completion("get_order_detail", '{"detail": "full",  '
                                     '"order_id": "#W1234567"}')
    send = ListSend(reordered, VALID)
    result, _ = await ladder(INVALID, send, max_repairs=3)
    assert result.outcome == "repeated_failure" and len(send.bodies) == 1


async def test_different_arguments_are_not_a_repeat() -> None:
    changed = tool_call_completion("get_order_detail", {**GOOD, "detail": "brief"})
    send = ListSend(changed, VALID)
    result, _ = await ladder(INVALID, send, max_repairs=3)
    assert result.outcome == "fixed_by_reask" and len(send.bodies) == 2


async def test_unparsable_arguments_repeat_as_raw_text() -> None:
    broken = tool_call_completion("get_order_details", '{"order_id": "#W1234567"')
    send = ListSend(broken, VALID)
    result, _ = await ladder(broken, send, max_repairs=3)
    assert result.outcome == "repeated_failure" and len(send.bodies) == 1


async def test_a_repeat_of_an_invented_id_is_not_constrained() -> None:
    rules = CallRules(toolset=RULES.toolset,
                      grounding=collect_sources(chat_body()["messages"], False),
                      identifier_pattern=re.compile(DEFAULT_PATTERN))
    invented = tool_call_completion("get_order_details",
                                    {"order_id": "#W9999999", "detail": "full"})
    send = ListSend(invented, VALID)
    result, _ = await ladder(invented, send, rules, constrained="tool_choice", max_repairs=3)
    assert result.outcome == "repeated_failure" and len(send.bodies) == 1


async def test_constrained_from_constrains_every_re_ask_from_that_one() -> None:
    send = ListSend(OTHER, tool_call_completion("get_order_detaill", GOOD), VALID)
    _, seen = await ladder(INVALID, send, max_repairs=3, constrained="tool_choice",
                           constrained_from=2)
    assert [a.kind for a in seen] == ["initial", "reask", "constrained", "constrained"]


async def test_withhold_returns_the_first_text_without_calls() -> None:
    said = tool_call_completion("get_order_detail", GOOD, content="Let me look.")
    send = ListSend(said)
    result, _ = await ladder(said, send, max_repairs=1, on_exhausted="withhold")
    assert withholds(result, "withhold") and not withholds(result, "passthrough")
    returned = returned_attempt(result, "withhold")
    assert returned.reply.tool_calls == () and returned.reply.content == "Let me look."
    message = agent_completion(result, returned)["choices"][0]
    assert "tool_calls" not in message["message"] and message["finish_reason"] == "stop"


async def test_withhold_without_text_says_a_short_question() -> None:
    send = ListSend(INVALID)
    result, _ = await ladder(INVALID, send, max_repairs=1, on_exhausted="withhold")
    returned = returned_attempt(result, "withhold")
    assert returned.reply.content == WITHHELD_TEXT and returned.lifted


async def test_withhold_leaves_a_valid_answer_alone() -> None:
    send = ListSend(VALID)
    result, _ = await ladder(INVALID, send, max_repairs=1, on_exhausted="withhold")
    assert returned_attempt(result, "withhold") is result.final


async def test_original_after_a_repeat_returns_the_first_answer() -> None:
    send = ListSend(INVALID)
    result, _ = await ladder(INVALID, send, max_repairs=3)
    assert returned_attempt(result, "original") is result.attempts[0]


async def test_each_re_ask_shows_only_the_latest_failure() -> None:
    send = ListSend(OTHER, VALID)
    await ladder(INVALID, send, max_repairs=2)
    base = len(chat_body()["messages"])
    assert [len(b["messages"]) for b in send.bodies] == [base + 2, base + 2]


async def test_empty_text_reply_is_re_asked_with_a_user_instruction() -> None:
    empty = completion_with_message({"role": "assistant", "content": ""}, "stop")
    send = ListSend(VALID)
    result, _ = await ladder(empty, send)
    assert result.outcome == "fixed_by_reask"
    assert send.bodies[0]["messages"][-1]["role"] == "user"


async def test_plain_text_is_clean() -> None:
    result, _ = await ladder(text_completion("Which order do you mean?"), ListSend())
    assert result.outcome == "clean"
