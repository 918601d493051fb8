"""History hygiene, pure: each kind of broken historical call, what replaces it, the notes the
model reads, the consistency rules (issue 22), the bounds, and the caller's body untouched."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflexguard.core.history import (
    MAX_REPAIR_CHARS,
    MAX_REPAIR_TOTAL,
    NOTE_PREFIX,
    RepairAllowance,
    object_replacement,
    replacement,
)
from reflexguard.dialects.history import clean_history, needs_work
from reflexguard.dialects.history_chat import repair_chat
from reflexguard.dialects.history_messages import repair_messages
from reflexguard.dialects.history_responses import repair_responses

GOOD = '{"order_id": "#W1", "detail": "full"}'


def chat(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}, *turns]}


def call_turn(*calls: tuple[str, object]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": a}}
        for i, a in calls]}


def result(call_id: str, content: object = "done") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


USER = {"role": "user", "content": "next"}


# -- what replaces what ------------------------------------------------------------------

def test_a_json_object_string_needs_nothing() -> None:
    assert replacement(GOOD) is None
    assert replacement('  {"a": [1, {"b": null}]}  ') is None


@pytest.mark.parametrize(("arguments", "kind", "becomes", "noted"), [
    ({"a": 1}, "object_not_string", '{"a":1}', False),
    ("", "empty_arguments", "{}", False),
    ("   ", "empty_arguments", "{}", False),
    ('{"order_id": "#W1", "detail": "fu', "broken_json_repaired",
     '{"order_id":"#W1","detail":"fu"}', True),
    ("not json at all", "broken_json_emptied", "{}", True),
    ("[1, 2]", "not_an_object", "{}", True),
    ("null", "not_an_object", "{}", True),
    (None, "not_an_object", "{}", True),
    (json.dumps(GOOD), "not_an_object", GOOD, True),  # an object encoded twice
])
def test_each_broken_form_gets_a_canonical_object(arguments: object, kind: str, becomes: str,
                                                  noted: bool) -> None:
    fixed = replacement(arguments)
    assert fixed is not None
    assert fixed.kind == kind
    assert fixed.arguments == becomes
    assert isinstance(json.loads(fixed.arguments), dict)
    assert (fixed.note is not None) is noted
    if fixed.note is not None:
        assert fixed.note.startswith(NOTE_PREFIX)


def test_a_messages_input_must_be_an_object() -> None:
    assert object_replacement({"a": 1}) is None
    parsed = object_replacement('{"a": 1}')
    assert parsed is not None and parsed.value == {"a": 1} and parsed.kind == "not_an_object"
    broken = object_replacement('{"a": ')
    assert broken is not None and isinstance(broken.value, dict) and broken.note
    listed = object_replacement([1])
    assert listed is not None and listed.value == {} and listed.kind == "not_an_object"


def test_json_repair_is_not_given_more_than_its_bound() -> None:
    long = '{"content": "' + "x" * MAX_REPAIR_CHARS  # unterminated, just over the bound
    fixed = replacement(long)
    assert fixed is not None and fixed.kind == "broken_json_emptied"
    assert fixed.note is not None and len(fixed.note) < 400  # quotes only the start
    # And per request: once MAX_REPAIR_TOTAL is spent, later broken calls become {}.
    piece = '{"a": "' + "y" * (MAX_REPAIR_CHARS - 100)
    count = MAX_REPAIR_TOTAL // len(piece) + 2
    body = chat(call_turn(*[(f"c{i}", piece) for i in range(count)]))
    _, report = repair_chat(body)
    assert report.kinds["broken_json_repaired"] == MAX_REPAIR_TOTAL // len(piece)
    assert report.kinds["broken_json_emptied"] == count - MAX_REPAIR_TOTAL // len(piece)


# -- chat --------------------------------------------------------------------------------

def test_the_callers_body_is_never_mutated() -> None:
    body = chat(call_turn(("c1", '{"a": '), ("c2", {"b": 2})), result("c1", "Error: bad"),
                result("c2"), USER, call_turn(("c3", "")), USER)
    before = copy.deepcopy(body)
    repaired, report = repair_chat(body)
    assert body == before
    assert repaired is not body and repaired["messages"] is not body["messages"]
    assert report.changed


def test_the_note_goes_after_the_result_so_a_failure_still_reads_as_one() -> None:
    body = chat(call_turn(("c1", "{not json")), result("c1", "Error: bad input"), USER)
    repaired, _ = repair_chat(body)
    content = repaired["messages"][2]["content"]
    assert content.startswith("Error: bad input")
    assert "not valid JSON" in content and "{not json" in content


def test_a_note_joins_a_result_given_as_parts() -> None:
    body = chat(call_turn(("c1", "{not json")),
                result("c1", [{"type": "text", "text": "Error: bad"}]), USER)
    repaired, _ = repair_chat(body)
    parts = repaired["messages"][2]["content"]
    assert parts[0] == {"type": "text", "text": "Error: bad"}
    assert parts[1]["text"].startswith(NOTE_PREFIX)


def test_a_valid_history_is_the_same_object() -> None:
    body = chat(call_turn(("c1", GOOD), ("c2", GOOD)), result("c1"), result("c2"), USER)
    repaired, report = repair_chat(body)
    assert repaired is body and not report.changed


def test_a_call_without_a_result_before_the_next_turn_gets_one_after_the_others() -> None:
    body = chat(call_turn(("c1", GOOD), ("c2", GOOD)), result("c1"), USER)
    repaired, report = repair_chat(body)
    assert report.kinds == {"missing_result": 1}
    roles = [(m["role"], m.get("tool_call_id")) for m in repaired["messages"]]
    assert roles == [("user", None), ("assistant", None), ("tool", "c1"), ("tool", "c2"),
                     ("user", None)]
    added = repaired["messages"][3]["content"]
    assert added.startswith(NOTE_PREFIX) and not added.startswith("Error:")


def test_calls_that_end_the_conversation_are_left_waiting_for_their_results() -> None:
    body = chat(call_turn(("c1", GOOD)))
    assert repair_chat(body)[0] is body


def test_a_result_matching_no_call_and_duplicated_ids_pass_as_sent() -> None:
    """vLLM and llama-server render both; a hosted API's own 400 reaches the agent."""
    orphan = chat(result("nobody"), USER)
    duplicated = chat(call_turn(("c1", GOOD), ("c1", GOOD)), result("c1"), result("c1"), USER)
    for body in (orphan, duplicated):
        raw = orjson.dumps(body)
        assert clean_history(raw, "chat")[0] is raw


# -- Messages and Responses --------------------------------------------------------------

def test_messages_input_repaired_and_a_missing_result_opens_the_next_user_message() -> None:
    body = {"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "f", "input": '{"a": 1'},
            {"type": "tool_use", "id": "t2", "name": "f", "input": {"b": 2}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": True},
            {"type": "text", "text": "go on"}]}]}
    before = copy.deepcopy(body)
    repaired, report = repair_messages(body)
    assert body == before
    assert report.kinds == {"broken_json_repaired": 1, "missing_result": 1}
    assert repaired["messages"][1]["content"][0]["input"] == {"a": 1}
    blocks = repaired["messages"][2]["content"]
    assert [b.get("tool_use_id") for b in blocks] == ["t2", "t1", None]
    assert blocks[1]["is_error"] is True and NOTE_PREFIX in blocks[1]["content"]


def test_messages_results_get_a_user_message_of_their_own_before_another_assistant_turn() -> None:
    body = {"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                           "input": {}}]},
        {"role": "assistant", "content": "so"}]}
    repaired, report = repair_messages(body)
    assert report.kinds == {"missing_result": 1}
    assert [m["role"] for m in repaired["messages"]] == ["user", "assistant", "user",
                                                         "assistant"]


def test_responses_arguments_repaired_and_missing_outputs_added() -> None:
    body = {"model": "m", "input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{\"x\": "},
        {"type": "function_call_output", "call_id": "a", "output": "Error: no"},
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": {"y": 1}},
        {"role": "user", "content": "next"}]}
    before = copy.deepcopy(body)
    repaired, report = repair_responses(body)
    assert body == before
    assert report.kinds == {"broken_json_repaired": 1, "object_not_string": 1,
                            "missing_result": 1}
    items = repaired["input"]
    assert items[2]["output"].startswith("Error: no") and NOTE_PREFIX in items[2]["output"]
    assert items[3]["arguments"] == '{"y":1}'
    assert items[4]["type"] == "function_call_output" and items[4]["call_id"] == "b"


# -- the bytes edge ----------------------------------------------------------------------

@pytest.mark.parametrize("dialect", ["chat", "messages", "responses"])
def test_a_history_without_calls_is_the_same_bytes(dialect: str) -> None:
    raw = orjson.dumps(chat(USER))
    assert clean_history(raw, dialect)[0] is raw


def test_a_body_that_is_not_json_is_left_for_the_reading_to_refuse() -> None:
    raw = b'{"messages": [{"tool_calls": '
    assert clean_history(raw, "chat")[0] is raw


ARGUMENTS = st.one_of(
    st.just(GOOD), st.just(""), st.just("{"), st.just("[]"), st.just('{"a": "b'),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.none())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(ARGUMENTS, st.booleans(), st.booleans()), min_size=1, max_size=4))
def test_the_cheap_check_never_misses_what_the_repair_would_change(
        turns: list[tuple[object, bool, bool]]) -> None:
    """needs_work is the fast path's only gate: whenever it says no, the full repair
    finds nothing to change."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for index, (arguments, answered, user_after) in enumerate(turns):
        messages.append(call_turn((f"c{index}", arguments)))
        if answered:
            messages.append(result(f"c{index}"))
        if user_after:
            messages.append(USER)
    body = {"model": "m", "messages": messages}
    if not needs_work(body, "chat"):
        assert not repair_chat(body)[1].changed


INPUTS = st.one_of(st.just({"a": 1}), st.just('{"a": 1}'), st.just("{"), st.just([1]),
                   st.none())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(INPUTS, st.booleans(), st.booleans()), min_size=1, max_size=4))
def test_the_cheap_check_never_misses_a_messages_repair(
        turns: list[tuple[object, bool, bool]]) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for index, (value, answered, user_after) in enumerate(turns):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{index}", "name": "f", "input": value}]})
        blocks: list[dict[str, Any]] = []
        if answered:
            blocks.append({"type": "tool_result", "tool_use_id": f"t{index}", "content": "ok"})
        if user_after or answered:
            messages.append({"role": "user", "content": [*blocks,
                                                         {"type": "text", "text": "go"}]})
    body = {"model": "m", "messages": messages}
    if not needs_work(body, "messages"):
        assert not repair_messages(body)[1].changed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(ARGUMENTS, st.booleans(), st.booleans()), min_size=1, max_size=4))
def test_the_cheap_check_never_misses_a_responses_repair(
        turns: list[tuple[object, bool, bool]]) -> None:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "hi"}]
    for index, (arguments, answered, user_after) in enumerate(turns):
        items.append({"type": "function_call", "call_id": f"c{index}", "name": "f",
                      "arguments": arguments})
        if answered:
            items.append({"type": "function_call_output", "call_id": f"c{index}",
                          "output": "ok"})
        if user_after:
            items.append({"role": "user", "content": "next"})
    body = {"model": "m", "input": items}
    if not needs_work(body, "responses"):
        assert not repair_responses(body)[1].changed


def test_past_the_bound_the_rest_of_the_history_goes_as_sent() -> None:
    """A hostile history of many broken calls: the first MAX_REPAIRED_CALLS are repaired,
    the rest forwarded as sent (as without reflexguard) and counted."""
    from reflexguard.core.history import MAX_REPAIRED_CALLS

    count = MAX_REPAIRED_CALLS + 50
    items: list[Any] = [{"type": "message", "role": "user", "content": "hi"}]
    items += [{"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{x"}
              for i in range(count)]
    items.append({"type": "function_call_output", "call_id": "all", "output": "ok"})
    repaired, report = repair_responses({"model": "m", "input": items})
    assert sum(report.kinds.values()) == MAX_REPAIRED_CALLS
    assert report.left_as_sent >= 1
    assert repaired["input"][-2]["arguments"] == "{x"  # past the bound: as sent
    assert len(repaired["input"]) == len(items)


def test_broken_json_encoded_twice_spends_no_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review finding: a JSON string of broken JSON went through json-repair with a fresh
    allowance of its own, so 100 such calls cost seconds of loop past the request's bound."""
    import json_repair

    calls: list[str] = []
    real = json_repair.loads
    monkeypatch.setattr(json_repair, "loads", lambda text, *a, **k: (calls.append(text),
                                                                      real(text))[1])
    allowance = RepairAllowance(left=0, calls=0)  # nothing left to spend
    out = replacement(json.dumps('{"a": 1,, "b": '), allowance)
    assert calls == [] and out is not None and out.value == {}
