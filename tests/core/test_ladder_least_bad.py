"""When the ladder gives up: the least-bad attempt (`on_exhausted: best`, the default),
and the named choices beside it. Driven in memory through the ladder's `send` seam."""

from __future__ import annotations

import json
from typing import Any

from reflexguard.core.attempts import LadderResult, read_attempt
from reflexguard.core.choice import badness, chosen_attempt, returned_attempt, settle_choice
from reflexguard.core.fixes import FixPolicy
from reflexguard.core.ladder import GuardPolicy, run_ladder
from reflexguard.core.model import JsonObject
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules
from tests.core.test_ladder import ListSend
from tests.fakes.fake_upstream import text_completion, tool_call_completion

# BFCL live_simple_184, as its tools list reads on the wire (BFCL's "dict"/"float" are
# "object"/"number" there).
PROFESSIONAL = {"type": "function", "function": {
    "name": "getDataForProfessional",
    "description": "Retrieves professional workers matching service, province and rating.",
    "parameters": {
        "type": "object",
        "required": ["service_id", "province_id"],
        "properties": {
            "service_id": {"type": "integer"},
            "province_id": {"type": "integer"},
            "district_name": {"type": "string", "default": None},
            "rating": {"type": "number", "default": None},
        },
    },
}}
RULES = CallRules(toolset=ToolSetCache().get([PROFESSIONAL]))
NAME = "getDataForProfessional"
FIRST_ARGS = {"service_id": 1, "province_id": 1, "district_name": None, "rating": 4.0}
# The first answer: a schema_violation (district_name: null is not a string).
FIRST = tool_call_completion(NAME, FIRST_ARGS)
BROKEN_JSON = tool_call_completion(NAME, '{"service_id": 1, "province_id": 1, "rating":')
AS_STRING = tool_call_completion(NAME, json.dumps(json.dumps(FIRST_ARGS)))
VALID = tool_call_completion(NAME, {"service_id": 1, "province_id": 1, "rating": 4.0})
WRONG_NAME = tool_call_completion("getDataForProfessionals", FIRST_ARGS)
OTHER_SCHEMA = tool_call_completion(NAME, {"service_id": "one", "province_id": 1})
# The fixes off: the case as it was seen, where only the choice can save the answer.
NO_FIXES = FixPolicy(safe=False)
BODY = {"model": "m", "messages": [{"role": "user", "content": "cleaning in Bangkok, 4+"}],
        "tools": [PROFESSIONAL]}


async def give_up(*reasks: JsonObject, first: JsonObject = FIRST,
                  **policy: Any) -> LadderResult:
    policy.setdefault("fixes", NO_FIXES)
    send = ListSend(*reasks)
    result = await run_ladder(BODY, read_attempt(1, "initial", first, RULES, False, 0.0),
                              RULES, GuardPolicy(max_repairs=len(reasks), **policy), send,
                              lambda _: None)
    assert result.gave_up and send.answers == []
    return result


async def test_live_simple_184_the_first_answer_is_returned_when_re_asks_are_worse() -> None:
    result = await give_up(BROKEN_JSON, AS_STRING)
    returned = returned_attempt(result, "best")
    assert returned is result.attempts[0]
    assert json.loads(returned.reply.tool_calls[0].arguments) == FIRST_ARGS
    assert chosen_attempt(result, returned) == "1"
    assert settle_choice(result, "best") == "1"
    assert "least_bad_attempt_returned" in result.fallbacks


async def test_best_is_the_default() -> None:
    assert GuardPolicy().on_exhausted == "best"
    result = await give_up(BROKEN_JSON, AS_STRING)
    assert returned_attempt(result, GuardPolicy().on_exhausted) is result.attempts[0]


async def test_a_later_strictly_better_attempt_wins() -> None:
    # First: an unknown tool (severity 6); the second re-ask a schema_violation (2).
    result = await give_up(BROKEN_JSON, OTHER_SCHEMA, first=WRONG_NAME)
    returned = returned_attempt(result, "best")
    assert returned is result.attempts[2] and returned.number == 3
    assert settle_choice(result, "best") == "3"


async def test_fewer_invalid_calls_beats_a_milder_channel() -> None:
    two_calls = tool_call_completion(NAME, FIRST_ARGS)
    calls = two_calls["choices"][0]["message"]["tool_calls"]
    calls.append({**calls[0], "id": "call_2"})
    result = await give_up(WRONG_NAME, first=two_calls)
    assert badness(result.attempts[0])[0] == 2
    assert returned_attempt(result, "best") is result.attempts[1]


async def test_ties_keep_the_earliest() -> None:
    # Same count, same channel (schema_violation) three times: the first answer.
    result = await give_up(OTHER_SCHEMA, tool_call_completion(NAME, {"service_id": 2}))
    assert [badness(a) for a in result.attempts] == [(1, (2,))] * 3
    assert returned_attempt(result, "best") is result.attempts[0]
    assert settle_choice(result, "best") == "1"


async def test_an_empty_reply_is_the_worst() -> None:
    result = await give_up(text_completion(""), first=BROKEN_JSON)
    assert returned_attempt(result, "best") is result.attempts[0]


async def test_passthrough_still_returns_the_last_attempt() -> None:
    result = await give_up(BROKEN_JSON, AS_STRING, on_exhausted="passthrough")
    assert returned_attempt(result, "passthrough") is result.final
    assert settle_choice(result, "passthrough") == "3"
    assert "least_bad_attempt_returned" not in result.fallbacks


async def test_original_still_returns_the_first_answer_even_when_a_later_is_better() -> None:
    result = await give_up(BROKEN_JSON, OTHER_SCHEMA, first=WRONG_NAME,
                           on_exhausted="original")
    assert returned_attempt(result, "original") is result.attempts[0]


async def test_a_valid_repair_is_returned_whatever_the_choice() -> None:
    for choice in ("best", "passthrough", "original"):
        send = ListSend(VALID)
        result = await run_ladder(
            BODY, read_attempt(1, "initial", FIRST, RULES, False, 0.0), RULES,
            GuardPolicy(fixes=NO_FIXES, on_exhausted=choice), send,  # type: ignore[arg-type]
            lambda _: None)
        assert result.outcome == "fixed_by_reask"
        assert returned_attempt(result, choice) is result.final  # type: ignore[arg-type]


async def test_a_fixed_attempt_is_named_as_such() -> None:
    # The safe fixes (on by default) drop the null: valid, no re-ask; the agent gets "1+fix".
    send = ListSend()
    result = await run_ladder(BODY, read_attempt(1, "initial", FIRST, RULES, False, 0.0),
                              RULES, GuardPolicy(), send, lambda _: None)
    assert result.outcome == "fixed_by_fix" and send.bodies == []
    assert settle_choice(result, "best") == "1+fix"
