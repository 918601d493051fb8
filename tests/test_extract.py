"""Finding calls written as text, in the shapes servers and small models produce."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reflexguard.completion import lift_text_calls
from reflexguard.extract import extract_calls
from reflexguard.model import Reply


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
