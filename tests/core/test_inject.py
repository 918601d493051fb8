"""Fault injection's pure core: the spec, the draws, and the damage (core/inject.py)."""

from __future__ import annotations

import json

import pytest

from reflexguard.core.channels import Channel
from reflexguard.core.fault_spec import FaultSpec, FaultSpecError, parse_fault_spec
from reflexguard.core.inject import inject, name_variants, near_miss, request_key
from reflexguard.core.model import Reply, ToolCall
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply
from tests.conftest import TOOLS

GOOD = json.dumps({"order_id": "#W1234567", "detail": "full"})


def toolset():  # type: ignore[no-untyped-def]
    return ToolSetCache().get(TOOLS)


def reply(*names: str, arguments: str = GOOD) -> Reply:
    return Reply(tool_calls=tuple(ToolCall(id=f"c{i}", name=n, arguments=arguments)
                                  for i, n in enumerate(names)))


def key(i: int) -> bytes:
    return request_key({"messages": [{"role": "user", "content": f"ask {i}"}]}, "d")


def test_the_typed_spec_and_the_mapping_read_the_same():
    typed = parse_fault_spec("unknown_tool=0.2, malformed-args=0.1;seed=7,reasks=on")
    mapped = parse_fault_spec({"unknown_tool": 0.2, "malformed_args": 0.1, "seed": 7,
                               "reasks": True})
    assert typed == mapped == FaultSpec(unknown_tool=0.2, malformed_args=0.1, seed=7,
                                        reasks=True)
    assert typed is not None
    assert typed.text() == "unknown_tool=0.2,malformed_args=0.1,seed=7,reasks=on"
    assert parse_fault_spec(typed.text()) == typed


@pytest.mark.parametrize("off", ["", "off", "OFF", "none", None, False])
def test_off_is_no_spec(off):
    assert parse_fault_spec(off) is None


def test_all_rates_zero_stays_on_so_it_is_still_said():
    spec = parse_fault_spec("seed=3")
    assert spec is not None and not spec.active


@pytest.mark.parametrize("text, words", [
    ("unknown_tool=1.5", "less than or equal to 1"),
    ("unknown_tool=0.7,schema_violation=0.5", "add up to 1.2"),
    ("unknwn_tool=0.1", "did you mean unknown_tool"),
    ("unknown_tool", "not key=value"),
    ("seed=-1", "greater than or equal to 0"),
    ("reasks=sometimes", "on or off"),
    ("unknown_tool=0.1,unknown_tool=0.2", "twice"),
])
def test_a_bad_spec_says_what_is_wrong(text, words):
    with pytest.raises(FaultSpecError, match=words):
        parse_fault_spec(text)


def test_the_same_key_and_seed_draw_the_same_faults_and_another_seed_others():
    spec = FaultSpec(unknown_tool=0.3, malformed_args=0.3, schema_violation=0.3, seed=1)
    ts = toolset()
    original = reply("get_order_details", "cancel_order", "get_order_details")
    runs = [inject(original, ts, spec, key(i)) for i in range(40)]
    again = [inject(original, ts, spec, key(i)) for i in range(40)]
    assert runs == again
    other = [inject(original, ts, spec, key(i), seed=2) for i in range(40)]
    assert [r[1] for r in other] != [r[1] for r in runs]
    assert original == reply("get_order_details", "cancel_order", "get_order_details")


@pytest.mark.parametrize("channel", [Channel.UNKNOWN_TOOL, Channel.MALFORMED_ARGS,
                                     Channel.SCHEMA_VIOLATION])
def test_a_fault_is_seen_by_the_validator_in_its_own_channel(channel):
    spec = FaultSpec(**{channel.value: 1.0})
    ts = toolset()
    rules = CallRules(toolset=ts)
    for i in range(60):
        damaged, injected, skipped = inject(reply("get_order_details"), ts, spec, key(i))
        assert [f.channel for f in injected] == [channel] and not skipped
        verdict = validate_reply(damaged, rules)
        assert [c.channel for c in verdict.calls] == [channel], injected[0].detail


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.4])
def test_the_share_of_damaged_calls_is_the_rate(rate):
    spec = FaultSpec(unknown_tool=rate, seed=11)
    ts = toolset()
    calls = 3000
    hit = sum(len(inject(reply("get_order_details"), ts, spec, key(i))[1])
              for i in range(calls))
    # 3000 Bernoulli draws: 4 standard deviations either side.
    spread = 4 * (rate * (1 - rate) / calls) ** 0.5
    assert rate - spread < hit / calls < rate + spread


def test_rates_split_one_draw_so_a_call_gets_one_fault_at_most():
    spec = FaultSpec(unknown_tool=0.5, schema_violation=0.5, seed=5)
    ts = toolset()
    counts = {Channel.UNKNOWN_TOOL: 0, Channel.SCHEMA_VIOLATION: 0}
    for i in range(400):
        _, injected, _ = inject(reply("get_order_details"), ts, spec, key(i))
        assert len(injected) == 1
        counts[injected[0].channel] += 1
    assert all(100 < n < 300 for n in counts.values())


def test_rate_zero_and_a_reply_without_calls_are_left_alone():
    ts = toolset()
    text = Reply(content="Which order?")
    assert inject(text, ts, FaultSpec(unknown_tool=1.0), key(0)) == (text, (), ())
    call = reply("get_order_details")
    assert inject(call, ts, FaultSpec(seed=4), key(0)) == (call, (), ())


def test_a_fault_is_not_put_on_a_call_already_wrong_in_that_way():
    ts = toolset()
    damaged, injected, skipped = inject(reply("get_order_detail"), ts,
                                        FaultSpec(unknown_tool=1.0), key(0))
    assert damaged == reply("get_order_detail") and not injected
    assert [s.channel for s in skipped] == [Channel.UNKNOWN_TOOL]
    _, injected, skipped = inject(reply("cancel_order", arguments="{'order_id': 1"), ts,
                                  FaultSpec(malformed_args=1.0), key(0))
    assert not injected and "already not JSON" in skipped[0].reason


def test_a_channel_the_dialect_cannot_carry_is_skipped_and_the_others_draw_the_same():
    ts = toolset()
    spec = FaultSpec(unknown_tool=0.3, malformed_args=0.3, seed=9)
    allowed = frozenset({Channel.UNKNOWN_TOOL, Channel.SCHEMA_VIOLATION})
    for i in range(60):
        full = inject(reply("get_order_details"), ts, spec, key(i))
        limited = inject(reply("get_order_details"), ts, spec, key(i), expressible=allowed)
        unknown = [f for f in full[1] if f.channel is Channel.UNKNOWN_TOOL]
        assert list(limited[1]) == unknown
        assert all(s.channel is Channel.MALFORMED_ARGS for s in limited[2])


def test_near_misses_are_the_recorded_kinds_and_never_an_offered_name():
    assert name_variants("math_factorial")["prefix_dropped"] == "factorial"
    assert name_variants("employee_fetch_data")["separator"] == "employee.fetch_data"
    assert name_variants("multiplayer_game_finder")["words"] == "Multiplayer Game Finder"
    assert name_variants("delete_task")["plural"] == "delete_tasks"
    assert name_variants("getWeather")["separator"] == "get_weather"
    import random

    offered = ["get_order", "get_orders", "order"]
    for seed in range(50):
        missed = near_miss("get_order", offered, random.Random(seed))
        assert missed is not None and missed[0] not in offered


def test_the_key_is_the_conversation_not_the_sampling_or_stream_fields():
    body = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}
    assert request_key(body, "d") == request_key({**body, "stream": True, "temperature": 0,
                                                  "model": "other"}, "d")
    assert request_key(body, "d") != request_key(body, "e")
    assert request_key(body, "d") != request_key(
        {"messages": [{"role": "user", "content": "hi!"}]}, "d")


def test_a_conversation_orjson_cannot_write_gets_a_stable_key_of_its_own():
    from reflexguard.core.inject import UnkeyableRequest, fallback_key

    body = {"messages": [{"role": "user", "content": "big", "n": 2**70}]}
    with pytest.raises(UnkeyableRequest):
        request_key(body, "d")
    assert fallback_key(body, "d") == fallback_key(dict(body), "d")
    assert fallback_key(body, "d") != fallback_key({"messages": []}, "d")
