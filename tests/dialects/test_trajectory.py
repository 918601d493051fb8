"""The conversation since the user last spoke, read as steps in each wire format
(reflexguard/dialects/trajectory.py)."""

from __future__ import annotations

import copy
from typing import Any

from reflexguard.core.loops import ERROR_MARK, Step, canonical
from reflexguard.dialects.trajectory import MAX_SCANNED_CALLS, steps_of

ARGS = '{"file_name": "example.txt"}'


def chat_call(call_id: str, name: str = "cat", arguments: str = ARGS) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def chat_result(call_id: str, text: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def test_chat_steps_since_the_last_user_message() -> None:
    body = {"messages": [
        {"role": "user", "content": "first task"},
        chat_call("a"), chat_result("a", "old"),
        {"role": "user", "content": "second task"},
        chat_call("b"), chat_result("b", "hello\n  world"),
        chat_call("c", "ls", "{}"), chat_result("c", [{"type": "text", "text": "x.txt"}]),
    ]}
    before = copy.deepcopy(body)
    assert steps_of(body, "chat")[0] == [Step("cat", canonical(ARGS), "hello world"),
                                      Step("ls", "{}", "x.txt")]
    assert body == before  # read, never changed


def test_chat_results_pair_by_id_then_by_position() -> None:
    parallel = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}
    body = {"messages": [{"role": "user", "content": "go"}, parallel,
                         chat_result("", "F"), chat_result("", "G")]}
    assert [(s.name, s.result) for s in steps_of(body, "chat")[0]] == [("f", "F"), ("g", "G")]
    by_id = {"messages": [{"role": "user", "content": "go"}, {
        "role": "assistant", "content": "", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        chat_result("2", "G"), chat_result("1", "F")]}
    assert [(s.name, s.result) for s in steps_of(by_id, "chat")[0]] == [("f", "F"), ("g", "G")]


def test_a_call_without_result_has_none() -> None:
    body = {"messages": [{"role": "user", "content": "go"}, chat_call("a")]}
    assert steps_of(body, "chat")[0] == [Step("cat", canonical(ARGS), None)]


def test_messages_results_in_user_messages_are_not_the_users_turn() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "cat", "input": {"file_name": "example.txt"}}
    body = {"messages": [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, use]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "hello"},
            {"type": "text", "text": "<system-reminder>keep going</system-reminder>"}]},
        {"role": "assistant", "content": [{**use, "id": "t2"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                      "content": [{"type": "text", "text": "boom"}],
                                      "is_error": True}]},
    ]}
    assert steps_of(body, "messages")[0] == [
        Step("cat", canonical(ARGS), "hello"),
        Step("cat", canonical(ARGS), ERROR_MARK + "boom")]


def test_messages_a_user_text_turn_starts_afresh() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "cat", "input": {}}
    body = {"messages": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "x"}]},
        {"role": "user", "content": [{"type": "text", "text": "now something else"}]},
    ]}
    assert steps_of(body, "messages")[0] == []


def test_responses_items() -> None:
    body = {"input": [
        {"role": "user", "content": "read it"},
        {"type": "function_call", "call_id": "c1", "name": "cat", "arguments": ARGS},
        {"type": "function_call_output", "call_id": "c1", "output": "hello"},
        {"type": "function_call", "call_id": "c2", "name": "cat", "arguments": ARGS},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "hello"}]},
    ]}
    assert steps_of(body, "responses")[0] == [Step("cat", canonical(ARGS), "hello")] * 2


def test_responses_string_input_and_unknown_dialects_have_no_steps() -> None:
    assert steps_of({"input": "hello"}, "responses") == ([], False)
    assert steps_of({"messages": "nonsense"}, "chat") == ([], False)
    assert steps_of({"messages": [chat_call("a")]}, "other") == ([], False)


def test_at_most_max_scanned_calls_are_read_and_the_cut_is_said() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(MAX_SCANNED_CALLS + 5):
        messages += [chat_call(f"c{i}", arguments=f'{{"n": {i}}}'), chat_result(f"c{i}", "r")]
    steps, cut = steps_of({"messages": messages}, "chat")
    assert cut and len(steps) == MAX_SCANNED_CALLS
    assert steps[-1].arguments == f'{{"n":{MAX_SCANNED_CALLS + 4}}}'  # the latest are kept
    steps, cut = steps_of({"messages": messages[:-10]}, "chat")
    assert not cut and len(steps) == MAX_SCANNED_CALLS
    assert steps[0].arguments == '{"n":0}'  # everything since the user spoke


def test_ids_of_any_json_type_pair_and_never_raise() -> None:
    """Arrays and objects as ids were a 500 where history hygiene hashed them (issue 30):
    the loop scan pairs them by JSON text too, in every dialect."""
    for odd in (["a"], {"a": 1}, 7, [[["x"]]]):
        chat = {"messages": [{"role": "user", "content": "go"},
                             {"role": "assistant", "content": "", "tool_calls": [
                                 {"id": odd, "type": "function",
                                  "function": {"name": "cat", "arguments": ARGS}}]},
                             {"role": "tool", "tool_call_id": odd, "content": "hi"}]}
        assert steps_of(chat, "chat")[0] == [Step("cat", canonical(ARGS), "hi")], odd
        messages = {"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": odd, "name": "cat",
                                               "input": {"file_name": "example.txt"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": odd,
                                          "content": "hi"}]}]}
        assert [s.result for s in steps_of(messages, "messages")[0]] == ["hi"], odd
        responses = {"input": [
            {"type": "message", "role": "user", "content": "go"},
            {"type": "function_call", "call_id": odd, "name": "cat", "arguments": ARGS},
            {"type": "function_call_output", "call_id": odd, "output": "hi"}]}
        assert [s.result for s in steps_of(responses, "responses")[0]] == ["hi"], odd
