"""Logit margins of tool calls, from recorded (llama-cpp-python) and vLLM-shaped payloads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from reflexguard.core.margins import CallMargin, completion_margins, token_margin, token_spans
from tests.fakes.vllm_logprobs import (
    CALL_MARGIN,
    CANCEL_NAME_MARGIN,
    GET_ORDER_NAME_MARGIN,
    native_two_calls,
    raw_bytes_split,
)

RECORDED = Path(__file__).parent / "fixtures" / "qwen05b_q4km_logprobs.json"


def recorded(case: str) -> dict[str, Any]:
    completions: dict[str, dict[str, Any]] = json.loads(
        RECORDED.read_text(encoding="utf-8"))["completions"]
    return completions[case]


def entries(completion: dict[str, Any]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = completion["choices"][0]["logprobs"]["content"]
    return content


def margin_by_hand(entry: dict[str, Any]) -> float:
    others = [t["logprob"] for t in entry["top_logprobs"] if t["token"] != entry["token"]]
    return float(entry["logprob"] - max(others))


def test_token_margin_is_the_gap_to_the_best_other_token() -> None:
    entry = {"token": "a", "logprob": -0.5,
             "top_logprobs": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.25},
                              {"token": "c", "logprob": -3.0}]}
    assert token_margin(entry) == pytest.approx(0.75)


def test_a_sampled_runner_up_has_a_negative_margin() -> None:
    entry = {"token": "b", "logprob": -1.25,
             "top_logprobs": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.25}]}
    assert token_margin(entry) == pytest.approx(-0.75)


@pytest.mark.parametrize("entry", [
    {"token": "a", "logprob": -0.5, "top_logprobs": [{"token": "a", "logprob": -0.5}]},
    {"token": "a", "logprob": -0.5, "top_logprobs": []},
    {"token": "a", "logprob": -0.5},
    {"token": "a", "logprob": None, "top_logprobs": [{"token": "b", "logprob": -1.0}]},
    {"token": "a", "logprob": "x", "top_logprobs": [{"token": "b", "logprob": -1.0}]},
    {"token": "a", "logprob": -0.5, "top_logprobs": [{"token": "b", "logprob": "-inf"}, 3]},
])
def test_margin_unknown_without_a_listed_alternative(entry: dict[str, Any]) -> None:
    assert token_margin(entry) is None


def test_recorded_call_in_a_fence_measured_on_the_name_tokens() -> None:
    completion = recorded("call")
    tokens = entries(completion)
    [margin] = completion_margins(completion)
    assert margin.index == 0 and margin.name == "cancel_pending_order"
    # The name's tokens are `cancel`, `_pending`, `_order` (the recorded tokenisation).
    at = [e["token"] for e in tokens].index("cancel")
    assert [e["token"] for e in tokens[at:at + 3]] == ["cancel", "_pending", "_order"]
    expected = min(margin_by_hand(e) for e in tokens[at:at + 3])
    assert margin.name_margin == pytest.approx(expected)
    # The call opens with the fence: the first token, where the reply chose a call.
    assert tokens[0]["token"] == "```"
    assert margin.call_margin == pytest.approx(margin_by_hand(tokens[0]))


def test_recorded_bare_json_call_opens_at_its_brace() -> None:
    completion = recorded("text")  # the 0.5B model called a tool it was not offered
    tokens = entries(completion)
    [margin] = completion_margins(completion)
    assert margin.name == "hello"
    hello = next(e for e in tokens if e["token"] == "hello")
    assert margin.name_margin == pytest.approx(margin_by_hand(hello))
    assert tokens[0]["token"] == '{"'
    assert margin.call_margin == pytest.approx(margin_by_hand(tokens[0]))


def test_recorded_split_emoji_tokens_do_not_crash_and_a_text_reply_has_one_margin() -> None:
    completion = recorded("unicode_no_tools")
    tokens = entries(completion)
    # llama-cpp-python decodes each piece of the split emoji with errors="ignore": "".
    assert "" in [e["token"] for e in tokens]
    text, spans = token_spans(tokens)
    assert "🎉" in completion["choices"][0]["message"]["content"] and "🎉" not in text
    assert len(spans) == len(tokens)
    assert completion_margins(completion) == [
        CallMargin(index=-1, name=None, name_margin=None, call_margin=token_margin(tokens[0]))]


def test_native_tool_calls_located_in_the_raw_call_text() -> None:
    margins = completion_margins(native_two_calls())
    assert [(m.index, m.name) for m in margins] == [
        (0, "get_order_details"), (1, "cancel_pending_order")]
    assert margins[0].name_margin == pytest.approx(GET_ORDER_NAME_MARGIN)
    assert margins[1].name_margin == pytest.approx(CANCEL_NAME_MARGIN)
    assert margins[0].call_margin == pytest.approx(CALL_MARGIN)
    # The second call's opening `<tool_call>` beat ending the reply by 1.3 nats.
    assert margins[1].call_margin == pytest.approx(1.3)


def test_vllm_replacement_character_tokens_are_placed_without_crashing() -> None:
    completion = native_two_calls()
    text, spans = token_spans(entries(completion))
    assert "caf\u00e9 \ufffd\ufffd\u4eac" in text
    assert all(s.start <= s.end for s in spans)


def test_raw_byte_tokens_rebuild_the_split_character() -> None:
    completion = raw_bytes_split()
    text, spans = token_spans(entries(completion))
    assert text == completion["choices"][0]["message"]["content"]
    east = text.index("東")
    split = [s for s in spans if s.start <= east < s.end]
    assert len(split) == 2  # both byte pieces of 東 sit on it
    [margin] = completion_margins(completion)
    assert margin.name == "greet" and margin.name_margin == pytest.approx(0.4)


def test_no_logprobs_gives_no_margins() -> None:
    completion = native_two_calls()
    del completion["choices"][0]["logprobs"]
    assert completion_margins(completion) == []
    assert completion_margins({"choices": "nope"}) == []
    assert completion_margins(native_two_calls(), choice=3) == []


def test_a_name_absent_from_the_tokens_has_unknown_margins() -> None:
    completion = native_two_calls()
    completion["choices"][0]["message"]["tool_calls"][0]["function"]["name"] = "renamed"
    margins = completion_margins(completion)
    assert margins[0] == CallMargin(0, "renamed", None, None)
    assert margins[1].name_margin == pytest.approx(CANCEL_NAME_MARGIN)


@pytest.mark.parametrize("garbage", [
    [None, 3, "x", {"token": 5, "logprob": "a", "bytes": [300], "top_logprobs": "z"}],
    [{"token": "{", "bytes": [-1]}, {"token": None, "logprob": math.nan, "top_logprobs": [{}]}],
])
def test_malformed_logprob_entries_never_raise(garbage: list[Any]) -> None:
    completion = native_two_calls()
    completion["choices"][0]["logprobs"]["content"] = garbage
    margins = completion_margins(completion)
    assert [m.name_margin for m in margins] == [None, None]
