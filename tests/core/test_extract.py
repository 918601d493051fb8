"""Finding calls written as text, in the shapes servers and small models produce."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflexguard.core.completion import lift_text_calls
from reflexguard.core.extract import MAX_SCAN_CHARS, extract_calls
from reflexguard.core.model import Reply


def test_tagged_calls_and_remainder() -> None:
    content = (
        'Let me look.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    found = extract_calls(content)
    assert [(c.name, c.arguments) for c in found.calls] == [("a", '{"x": 1}'), ("b", "{}")]
    assert found.remainder == "Let me look."


def test_fenced_and_bare_and_lists() -> None:
    fenced = '```json\n{"name": "a", "arguments": {"x": 1}}\n```'
    assert [c.name for c in extract_calls(fenced).calls] == ["a"]
    bare = '[{"name": "a", "arguments": {}}, {"name": "b", "parameters": {"y": 2}}]'
    assert [(c.name, c.arguments) for c in extract_calls(bare).calls] == [
        ("a", "{}"), ("b", '{"y": 2}')
    ]


def test_string_arguments_are_kept_raw() -> None:
    found = extract_calls('{"name": "a", "arguments": "{\\"x\\": 1}"}')
    assert found.calls[0].arguments == '{"x": 1}'


def test_broken_json_in_a_tag_is_still_a_call() -> None:
    found = extract_calls('<tool_call>{"name": "a", "arguments": {"x": 1,}</tool_call>')
    assert [c.name for c in found.calls] == ["a"]
    assert found.calls[0].arguments.startswith('{"x": 1,')


def test_a_reply_that_is_only_a_name_is_an_argumentless_call() -> None:
    found = extract_calls('  {"name": "done"} ')
    assert [(c.name, c.arguments) for c in found.calls] == [("done", "{}")]
    assert extract_calls('My name is {"name": "Ann"} ok').calls == ()


def test_objects_without_name_and_arguments_are_text() -> None:
    assert extract_calls('{"x": 1}').calls == ()
    assert extract_calls("no braces here").calls == ()


def test_lifting_makes_tool_calls() -> None:
    reply = Reply(content='```json\n{"name": "a", "arguments": {"x": 1}}\n```',
                  finish_reason="stop")
    lifted = lift_text_calls(reply)
    assert lifted.content is None
    assert lifted.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in lifted.tool_calls] == [("a", '{"x": 1}')]
    assert lift_text_calls(Reply(content="plain")) == Reply(content="plain")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_never_raises(text: str) -> None:
    extract_calls(text)
    extract_calls("<tool_call>" + text)
    extract_calls("{" + text)


# -- bounded work: untrusted text is classified in time linear in its size --------------

TIME_BOX = 0.1  # seconds; the largest input below is 1 MB
PATHOLOGICAL = {
    "python records": "Here are your orders: [{'id': 'W123', 'status': 'pending'}]" * 2000,
    "open brackets": "[{" * 500_000,
    "open braces": "{" * 1_000_000,
    "unterminated string": '{"name": "' + "a" * 1_000_000,
    "tag and newlines": "{<tool_call>x" + "\n" * 1_000_000 + "y",
    "fence and blanks": "{```json" + " " * 1_000_000 + "x",
    "many names": '{"name": "' * 100_000,
    "nested lists": "[" * 500_000 + "{",
    "valid objects": '{"a": 1}' * 125_000,
    "just under the cap": "[{'a': 1}] " * 23_000,
}


def _timed(text: str) -> float:
    started = time.perf_counter()
    extract_calls(text)
    return time.perf_counter() - started


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_text_is_classified_within_the_time_box(name: str) -> None:
    # The best of three runs: a shared machine's hiccup is not the code's cost.
    assert min(_timed(PATHOLOGICAL[name]) for _ in range(3)) < TIME_BOX


def test_python_records_never_loop_and_yield_no_call() -> None:
    found = extract_calls("Here are your orders: [{'id': 'W123', 'status': 'pending'}]")
    assert found.calls == ()


def test_a_list_that_does_not_parse_still_yields_its_first_object() -> None:
    found = extract_calls('[{"name": "a", "arguments": {}}, oops')
    assert [c.name for c in found.calls] == ["a"]


def test_oversize_text_is_not_scanned_and_says_so() -> None:
    found = extract_calls('{"name": "a", "arguments": {}}' + " " * (MAX_SCAN_CHARS + 1))
    assert found.calls == () and found.capped == "text_scan_oversize"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["[{", "{", "}", "]", '"', "'", "<tool_call>", "```", "\n",
                                 " ", '"name": "x"', '"arguments": {}', "\\", ":"]),
                max_size=4000))
def test_any_mix_of_openers_is_classified_within_the_time_box(pieces: list[str]) -> None:
    assert min(_timed("".join(pieces)) for _ in range(2)) < TIME_BOX
