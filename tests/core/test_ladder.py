"""The repair ladder driven in memory through its `send` seam: no socket, no server."""

from __future__ import annotations

import copy
import re
from typing import Any

from reflexguard.core.grounding import DEFAULT_PATTERN, collect_sources
from reflexguard.core.ladder import (
    Attempt,
    GuardPolicy,
    LadderResult,
    UpstreamFailure,
    read_attempt,
    run_ladder,
)
from reflexguard.core.model import JsonObject
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules
from tests.conftest import TOOLS, chat_body
from tests.fakes.fake_upstream import completion_with_message, text_completion, tool_call_completion

RULES = CallRules(toolset=ToolSetCache().get(TOOLS))
GOOD = {"order_id": "#W1234567", "detail": "full"}
VALID = tool_call_completion("get_order_details", GOOD)
INVALID = tool_call_completion("get_order_detail", GOOD)


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
    assert result.outcome == "exhausted"
    assert "tool_choice" not in send.bodies[0]
    assert "ask the user" in send.bodies[0]["messages"][-1]["content"]


async def test_the_constrained_attempt_is_the_last_rung() -> None:
    send = ListSend(INVALID, VALID)
    result, seen = await ladder(INVALID, send, constrained="response_format", max_repairs=2)
    assert [a.kind for a in seen] == ["initial", "reask", "constrained"]
    assert "response_format" not in send.bodies[0]
    assert send.bodies[1]["response_format"]["type"] == "json_object"
    assert result.outcome == "fixed_by_constrained"


async def test_an_upstream_failure_mid_ladder_keeps_the_last_answer() -> None:
    send = ListSend(INVALID, UpstreamFailure("down"))
    result, _ = await ladder(INVALID, send, max_repairs=3)
    assert result.outcome == "exhausted"
    assert result.fallbacks == ["repair_upstream_error", "exhausted"]
    assert result.failed_calls == 1 and result.upstream_calls == 3


async def test_a_repeated_identical_failure_is_re_asked_until_the_bound() -> None:
    # Today's behaviour: the bound alone stops a model that repeats itself.
    send = ListSend(INVALID, INVALID)
    result, seen = await ladder(INVALID, send, max_repairs=2)
    assert result.outcome == "exhausted" and len(send.bodies) == 2
    names = {a.reply.tool_calls[0].name for a in seen}
    assert names == {"get_order_detail"}


async def test_each_re_ask_shows_only_the_latest_failure() -> None:
    send = ListSend(INVALID, VALID)
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
