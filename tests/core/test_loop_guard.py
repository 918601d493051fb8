"""The loop guard after the ladder (reflexguard/core/loop_guard.py), driven in memory
through its `send` seam: what the agent gets, what the re-ask says, what is counted."""

from __future__ import annotations

import copy
import json
from typing import Any

from reflexguard.core.attempts import LadderResult, UpstreamFailure
from reflexguard.core.choice import agent_completion, returned_attempt
from reflexguard.core.ladder import GuardPolicy, run_ladder
from reflexguard.core.loop_guard import KEPT, LoopPolicy, guard_loops, settled_without_reask
from reflexguard.core.loops import LoopIndex, scan
from reflexguard.core.model import JsonObject, ToolChoice
from reflexguard.core.repair import ReaskTokens
from reflexguard.core.validate import CallRules
from reflexguard.dialects.trajectory import steps_of
from tests.conftest import chat_body
from tests.core.test_ladder import GOOD, INVALID, RULES, ListSend, first
from tests.fakes.fake_upstream import text_completion, tool_call_completion

ARGS = json.dumps(GOOD)
RESULT = "Order #W1234567: pending, 2 items."
REPEAT = tool_call_completion("get_order_details", GOOD)
OTHER = tool_call_completion("cancel_order", {"order_id": "#W1234567"})


def looping_body(times: int = 2, **extra: Any) -> JsonObject:
    """The user's question, then the same call `times` times with one result."""
    body = chat_body(**extra)
    for turn in range(times):
        body["messages"] = [*body["messages"], {
            "role": "assistant", "content": "", "tool_calls": [{
                "id": f"h{turn}", "type": "function",
                "function": {"name": "get_order_details", "arguments": ARGS}}]},
            {"role": "tool", "tool_call_id": f"h{turn}", "content": RESULT}]
    return body


def index_of(body: JsonObject, repeats: int = 2) -> LoopIndex:
    return scan(steps_of(body, "chat")[0], repeats)


async def guarded(body: JsonObject, answer: JsonObject, send: ListSend, mode: str = "repair",
                  rules: CallRules = RULES, **policy: Any) -> LadderResult:
    guard = GuardPolicy(**policy)
    result = await run_ladder(body, first(answer, rules), rules, guard, send, lambda _: None)
    return await guard_loops(body, result, rules, LoopPolicy(mode), index_of(body), send,  # type: ignore[arg-type]
                             lambda _: None, guard.on_exhausted, ReaskTokens(), False)


async def test_a_repeat_is_re_asked_once_and_the_new_answer_goes_out() -> None:
    body = looping_body()
    before = copy.deepcopy(body)
    send = ListSend(OTHER)
    result = await guarded(body, REPEAT, send)
    assert body == before  # the caller's request is never changed
    assert result.loop is not None and result.loop.action == "replaced"
    returned = returned_attempt(result, "best")
    assert returned.kind == "loop" and returned.reply.tool_calls[0].name == "cancel_order"
    assert result.upstream_calls == 2
    # the re-ask: the conversation, the repeated call, and a note saying what it repeats
    (reask,) = send.bodies
    note = reask["messages"][-1]
    assert note["role"] == "tool" and note["tool_call_id"] == "call_1"
    assert "already called" in note["content"] and "2 times" in note["content"]
    assert "pending, 2 items" in note["content"]
    assert not note["content"].startswith("Error")  # a repeat is not a failed call
    assert reask["messages"][:len(body["messages"])] == body["messages"]
    assert reask["max_tokens"] > 0  # bounded as every re-ask is


async def test_a_re_ask_that_repeats_again_gives_the_agent_the_original() -> None:
    send = ListSend(tool_call_completion("get_order_details", GOOD))
    result = await guarded(looping_body(), REPEAT, send)
    assert result.loop is not None
    assert (result.loop.action, result.loop.reason) == ("kept", "repeated_again")
    assert returned_attempt(result, "best").number == 1
    assert KEPT in result.fallbacks
    assert result.upstream_calls == 2
    # the agent pays for the re-ask it did not use
    assert agent_completion(result, result.final)["usage"]["prompt_tokens"] == 20


async def test_an_invalid_re_ask_or_a_failed_upstream_keeps_the_original() -> None:
    result = await guarded(looping_body(), REPEAT, ListSend(INVALID))
    assert result.loop is not None and result.loop.reason == "invalid"
    assert returned_attempt(result, "best").number == 1
    failed = await guarded(looping_body(), REPEAT, ListSend(UpstreamFailure("down")))
    assert failed.loop is not None and failed.loop.reason == "upstream_error"
    assert failed.failed_calls == 1 and returned_attempt(failed, "best").number == 1


async def test_a_text_answer_to_the_note_goes_out() -> None:
    result = await guarded(looping_body(), REPEAT, ListSend(text_completion("It is pending.")))
    assert result.loop is not None and result.loop.action == "replaced"
    assert returned_attempt(result, "best").reply.content == "It is pending."


async def test_observe_counts_and_changes_nothing() -> None:
    send = ListSend()
    result = await guarded(looping_body(), REPEAT, send, mode="observe")
    assert result.loop is not None and result.loop.action == "observed"
    assert send.bodies == [] and returned_attempt(result, "best").number == 1
    assert KEPT not in result.fallbacks


async def test_off_or_below_the_threshold_nothing_is_read() -> None:
    assert (await guarded(looping_body(), REPEAT, ListSend(), mode="off")).loop is None
    assert (await guarded(looping_body(times=1), REPEAT, ListSend())).loop is None
    assert (await guarded(looping_body(), OTHER, ListSend())).loop is None


async def test_an_invalid_reply_is_the_ladders_not_the_loop_guards() -> None:
    # the ladder repairs the invalid call into the repeated one: that answer is looked at
    send = ListSend(REPEAT, OTHER)
    result = await guarded(looping_body(), INVALID, send)
    assert result.outcome == "fixed_by_reask"
    assert result.loop is not None and result.loop.action == "replaced"
    assert returned_attempt(result, "best").reply.tool_calls[0].name == "cancel_order"


async def test_a_named_tool_choice_is_kept_without_a_re_ask() -> None:
    body = looping_body(tool_choice={"type": "function",
                                     "function": {"name": "get_order_details"}})
    rules = CallRules(toolset=RULES.toolset, tool_choice=ToolChoice.parse(body["tool_choice"]))
    send = ListSend()
    result = await guarded(body, REPEAT, send, rules=rules)
    assert result.loop is not None and result.loop.reason == "named_tool_choice"
    assert send.bodies == []


async def test_a_repeat_is_not_a_failure_for_the_budget() -> None:
    """The loop guard never turns a valid reply invalid: the budget's rules (withhold,
    within_budget) see the same valid reply they would without it."""
    result = await guarded(looping_body(), REPEAT, ListSend(REPEAT), on_exhausted="withhold")
    assert not result.gave_up and returned_attempt(result, "withhold").valid
    assert returned_attempt(result, "withhold").reply.tool_calls


def test_settled_without_reask_says_when_a_re_ask_is_due() -> None:
    body = looping_body()
    clean = LadderResult([first(REPEAT)], "clean")
    assert settled_without_reask(clean, RULES, LoopPolicy("repair"), index_of(body),
                                 "best") is None
    observed = settled_without_reask(clean, RULES, LoopPolicy("observe"), index_of(body), "best")
    assert observed is not None and observed.loop is not None


async def test_one_re_ask_per_run_later_repeats_are_kept_and_counted() -> None:
    """At the third identical call the guard re-asks; the model repeated anyway, so at the
    fourth it is not asked again (that would double the cost of every looping step)."""
    send = ListSend()
    result = await guarded(looping_body(times=3), REPEAT, send)
    assert result.loop is not None
    assert (result.loop.action, result.loop.reason) == ("kept", "past_threshold")
    assert send.bodies == [] and KEPT in result.fallbacks
    assert returned_attempt(result, "best").number == 1
