"""Every re-ask is bounded in length: max_tokens (max_output_tokens for Responses),
derived from the first answer within a floor and a ceiling, or the client's if smaller."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from reflexguard.core.attempts import read_attempt
from reflexguard.core.fixes import FixPolicy
from reflexguard.core.ladder import MAX_REASK_REPLY_CHARS, GuardPolicy, run_ladder
from reflexguard.core.model import JsonObject
from reflexguard.core.repair import (
    REASK_TOKENS_CEILING,
    REASK_TOKENS_FLOOR,
    ReaskTokens,
    bounded,
    client_token_limit,
)
from tests.conftest import chat_body
from tests.core.test_ladder import INVALID, OTHER, RULES, ListSend
from tests.fakes.fake_upstream import tool_call_completion


def with_usage(completion: JsonObject, tokens: int | None) -> JsonObject:
    out = copy.deepcopy(completion)
    if tokens is None:
        out.pop("usage", None)
    else:
        out["usage"] = {"prompt_tokens": 5, "completion_tokens": tokens,
                        "total_tokens": tokens + 5}
    return out


async def reask_bodies(first_tokens: int | None, body: JsonObject | None = None,
                       **policy: Any) -> list[JsonObject]:
    send = ListSend(OTHER, INVALID)
    await run_ladder(body or chat_body(),
                     read_attempt(1, "initial", with_usage(INVALID, first_tokens), RULES,
                                  False, 0.0),
                     RULES, GuardPolicy(fixes=FixPolicy(safe=False), **policy), send,
                     lambda _: None)
    return send.bodies


async def test_every_re_ask_carries_max_tokens_derived_from_the_first_answer() -> None:
    bodies = await reask_bodies(400)
    assert [b["max_tokens"] for b in bodies] == [800, 800]


async def test_the_derived_bound_has_a_floor_and_a_ceiling() -> None:
    # A short first answer: the floor on top of its own length, never a bare floor.
    assert [b["max_tokens"] for b in await reask_bodies(10)] == [10 + REASK_TOKENS_FLOOR] * 2
    assert [b["max_tokens"] for b in await reask_bodies(1_500)] == \
        [REASK_TOKENS_CEILING] * 2
    # A first answer longer than the ceiling: room to write it again, and the floor more.
    assert [b["max_tokens"] for b in await reask_bodies(50_000)] == \
        [50_000 + REASK_TOKENS_FLOOR] * 2
    # No usage reported: the ceiling.
    assert [b["max_tokens"] for b in await reask_bodies(None)] == [REASK_TOKENS_CEILING] * 2


async def test_a_re_ask_always_has_room_for_the_first_answer_and_the_floor() -> None:
    # The promise of docs/repair.md, where the factor's clamp alone fell short (issue 30):
    # a 1,900-token call under the 2,048 ceiling, a 17-token one under the 256 floor.
    assert [b["max_tokens"] for b in await reask_bodies(1_900)] == \
        [1_900 + REASK_TOKENS_FLOOR] * 2
    assert [b["max_tokens"] for b in await reask_bodies(17)] == [17 + REASK_TOKENS_FLOOR] * 2
    for first in (1, 100, 128, 129, 1_024, 1_792, 1_793, 2_048, 9_999):
        limit = ReaskTokens().limit(first, None)
        assert limit >= first + REASK_TOKENS_FLOOR
        assert limit == max(min(2 * first, REASK_TOKENS_CEILING), first + REASK_TOKENS_FLOOR)


async def test_the_clients_own_smaller_limit_wins() -> None:
    bodies = await reask_bodies(400, chat_body(max_tokens=100))
    assert [b["max_tokens"] for b in bodies] == [100, 100]
    bodies = await reask_bodies(400, chat_body(max_completion_tokens=5000))
    assert [b["max_completion_tokens"] for b in bodies] == [800, 800]
    assert all("max_tokens" not in b for b in bodies)  # one spelling, the client's


async def test_the_constrained_attempt_is_bounded_too() -> None:
    bodies = await reask_bodies(400, constrained="tool_choice")
    assert bodies[-1]["tool_choice"] and bodies[-1]["max_tokens"] == 800


async def test_a_fixed_setting_replaces_the_derived_bound() -> None:
    bodies = await reask_bodies(400, reask_tokens=ReaskTokens(fixed=64))
    assert [b["max_tokens"] for b in bodies] == [64, 64]


def test_each_wire_format_gets_its_own_field() -> None:
    assert bounded({"messages": [], "max_tokens": 4096}, 300) == \
        {"messages": [], "max_tokens": 300}  # Messages: required, so always present
    assert bounded({"input": "hi"}, 300) == {"input": "hi", "max_output_tokens": 300}
    assert bounded({"messages": []}, 300) == {"messages": [], "max_tokens": 300}
    body = {"messages": [], "max_tokens": 9}
    assert bounded(body, 300) is not body and body == {"messages": [], "max_tokens": 9}


def test_the_clients_limit_is_read_in_any_spelling() -> None:
    assert client_token_limit({"max_output_tokens": 50}) == 50
    assert client_token_limit({"max_tokens": 70, "max_completion_tokens": 60}) == 60
    assert client_token_limit({"max_tokens": True}) is None
    assert client_token_limit({"max_tokens": None}) is None


async def test_a_reply_too_large_to_echo_is_not_re_asked() -> None:
    """A call longer than MAX_REASK_REPLY_CHARS would be echoed into the model's context
    and read again on the loop per attempt (issue 18): the first answer is settled."""
    huge = tool_call_completion("get_order_detail",
                                orjson.dumps({"order_id": "x" * MAX_REASK_REPLY_CHARS}).decode())
    send = ListSend(OTHER)
    result = await run_ladder(chat_body(), read_attempt(1, "initial", huge, RULES, False, 0.0),
                              RULES, GuardPolicy(fixes=FixPolicy(safe=False)), send,
                              lambda _: None)
    assert send.bodies == []
    assert result.outcome == "not_repaired"
    assert result.fallbacks == ["reply_too_large_to_reask"]
