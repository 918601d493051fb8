"""Each channel, classified by the pure validator; and the validator never raises."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from reflexguard.core.channels import Channel
from reflexguard.core.grounding import DEFAULT_PATTERN, collect_sources
from reflexguard.core.model import Reply, ToolCall, ToolChoice
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply
from tests.conftest import TOOLS, chat_body

TOOLSET = ToolSetCache().get(TOOLS)
GOOD_ARGS = '{"order_id": "#W1234567", "detail": "full"}'


def rules(**overrides: object) -> CallRules:
    return CallRules(toolset=TOOLSET, **overrides)  # type: ignore[arg-type]


def channels(reply: Reply, **overrides: object) -> list[Channel]:
    return [v.channel for v in validate_reply(reply, rules(**overrides)).calls]


def call(name: str = "get_order_details", arguments: str = GOOD_ARGS, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


def test_valid_call_is_ok() -> None:
    assert channels(Reply(tool_calls=(call(),))) == [Channel.OK]


def test_name_not_offered_is_unknown_tool() -> None:
    assert channels(Reply(tool_calls=(call("get_order"),))) == [Channel.UNKNOWN_TOOL]


def test_broken_json_and_non_objects_are_malformed_args() -> None:
    for arguments in ['{"order_id": "#W1', "[1, 2]", '"text"', "", "null"]:
        assert channels(Reply(tool_calls=(call(arguments=arguments),))) == [
            Channel.MALFORMED_ARGS
        ], arguments


def test_big_integers_are_still_json() -> None:
    arguments = json.dumps({"order_id": "x", "detail": "full", "n": 10**30})
    assert channels(Reply(tool_calls=(call(arguments=arguments),))) == [
        Channel.SCHEMA_VIOLATION  # additionalProperties, not malformed
    ]


def test_schema_violations() -> None:
    cases = [
        '{"order_id": "#W1234567"}',  # missing required enum
        '{"order_id": 5, "detail": "full"}',  # wrong type
        '{"order_id": "#W1234567", "detail": "everything"}',  # not in enum
        '{"order_id": "#W1234567", "detail": "full", "extra": 1}',  # additionalProperties
    ]
    for arguments in cases:
        verdicts = validate_reply(Reply(tool_calls=(call(arguments=arguments),)), rules()).calls
        assert [v.channel for v in verdicts] == [Channel.SCHEMA_VIOLATION], arguments
        assert verdicts[0].detail


def test_text_calls_are_vanished() -> None:
    for content in [
        '<tool_call>{"name": "cancel_order", "arguments": {"order_id": "1"}}</tool_call>',
        'Sure:\n```json\n{"name": "cancel_order", "arguments": {"order_id": "1"}}\n```',
        '{"name": "cancel_order", "arguments": {"order_id": "1"}}',
    ]:
        assert channels(Reply(content=content)) == [Channel.VANISHED_CALL], content


def test_plain_text_is_not_a_call() -> None:
    assert channels(Reply(content="Your order has shipped.")) == []
    assert channels(Reply(content='The format is {"a": 1}.')) == []


def test_empty_reply() -> None:
    assert channels(Reply(content="  \n")) == [Channel.EMPTY_REPLY]
    assert channels(Reply()) == [Channel.EMPTY_REPLY]


def test_choice_violations() -> None:
    required = ToolChoice(mode="required")
    named = ToolChoice(mode="named", name="cancel_order")
    assert channels(Reply(content="hi"), tool_choice=required) == [Channel.CHOICE_VIOLATION]
    assert channels(Reply(tool_calls=(call(),)), tool_choice=named) == [Channel.CHOICE_VIOLATION]
    two = Reply(tool_calls=(call(id="a"), call(id="b")))
    assert channels(two, parallel_tool_calls=False) == [Channel.OK, Channel.CHOICE_VIOLATION]
    assert channels(two) == [Channel.OK, Channel.OK]
    assert channels(Reply(tool_calls=(call(),)), tool_choice=ToolChoice(mode="none")) == [
        Channel.CHOICE_VIOLATION
    ]


def test_each_call_gets_exactly_one_channel() -> None:
    reply = Reply(tool_calls=(call("nope", "{bad"), call(arguments="{bad"), call()))
    assert channels(reply) == [Channel.UNKNOWN_TOOL, Channel.MALFORMED_ARGS, Channel.OK]


def grounded_rules(messages: list[dict[str, object]], include_system: bool = False) -> dict:
    return {
        "grounding": collect_sources(messages, include_system),
        "identifier_pattern": re.compile(DEFAULT_PATTERN),
    }


def test_ungrounded_entity() -> None:
    messages = chat_body()["messages"]
    ok = Reply(tool_calls=(call(),))
    assert channels(ok, **grounded_rules(messages)) == [Channel.OK]
    copied = call(arguments='{"order_id": "#W0000000", "detail": "full"}')
    assert channels(Reply(tool_calls=(copied,)), **grounded_rules(messages)) == [
        Channel.UNGROUNDED_ENTITY
    ]


def test_tool_results_ground_but_schema_examples_do_not() -> None:
    messages = [
        {"role": "system", "content": "Ids look like #W0000000. Customer #W7777777 is VIP."},
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "x", "content": '{"orders": ["#W5555555"]}'},
    ]
    from_tool = call(arguments='{"order_id": "#W5555555", "detail": "full"}')
    example = call(arguments='{"order_id": "#W0000000", "detail": "full"}')
    in_system = call(arguments='{"order_id": "#W7777777", "detail": "full"}')
    with_system = grounded_rules(messages, include_system=True)
    assert channels(Reply(tool_calls=(from_tool,)), **grounded_rules(messages)) == [Channel.OK]
    assert channels(Reply(tool_calls=(example,)), **with_system) == [Channel.UNGROUNDED_ENTITY]
    assert channels(Reply(tool_calls=(in_system,)), **with_system) == [Channel.OK]
    assert channels(Reply(tool_calls=(in_system,)), **grounded_rules(messages)) == [
        Channel.UNGROUNDED_ENTITY
    ]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=30), arguments=st.text(max_size=200), content=st.text(max_size=200))
def test_validator_never_raises_on_arbitrary_strings(name: str, arguments: str,
                                                     content: str) -> None:
    reply = Reply(content=content, tool_calls=(ToolCall(id="x", name=name, arguments=arguments),))
    validate_reply(reply, rules(**grounded_rules(chat_body()["messages"])))
    validate_reply(Reply(content=content), rules())


@settings(max_examples=300, deadline=None)
@given(value=json_values, wrapped=st.booleans())
def test_validator_never_raises_on_arbitrary_json(value: object, wrapped: bool) -> None:
    arguments = json.dumps({"order_id": value, "detail": value} if wrapped else value)
    for name in ("get_order_details", "cancel_order"):
        reply = Reply(tool_calls=(ToolCall(id="x", name=name, arguments=arguments),))
        verdict = validate_reply(reply, rules(**grounded_rules(chat_body()["messages"])))
        assert len(verdict.calls) == 1
    validate_reply(Reply(content=json.dumps({"name": "x", "arguments": value})), rules())


def test_a_crashing_validator_is_check_fault_never_valid_nor_the_models_fault() -> None:
    import dataclasses

    class Exploding:
        def iter_errors(self, _: object) -> list[object]:
            raise RuntimeError("validator bug")

    spec = TOOLSET.specs["get_order_details"]
    broken = dataclasses.replace(TOOLSET, specs={**TOOLSET.specs, spec.name: dataclasses.replace(
        spec, validator=Exploding())})
    verdict = validate_reply(Reply(tool_calls=(call(),)), CallRules(toolset=broken))
    assert not verdict.valid  # issue 30: a fault inside a check is never "valid"
    assert verdict.calls[0].channel is Channel.CHECK_FAULT
    assert verdict.internal_events == ("validator_error",)


def test_a_capped_text_scan_is_reported() -> None:
    from reflexguard.core.extract import MAX_SCAN_CHARS

    verdict = validate_reply(Reply(content="{" + " " * MAX_SCAN_CHARS), rules())
    assert verdict.internal_events == ("text_scan_oversize",)


def test_a_failed_tool_result_does_not_ground_the_identifier_it_echoes() -> None:
    """tau2's environment answers an invented id with "Error: User 1234567890 not found":
    the id is then in the conversation, but only because the agent made it up."""
    messages = [
        {"role": "user", "content": "delete all my tasks"},
        {"role": "tool", "tool_call_id": "a", "content": "Error: User #W1234567 not found"},
        {"role": "tool", "tool_call_id": "b", "content": '{"orders": ["#W5555555"]}'},
    ]
    failed = re.compile(r"^Error:")
    echoed = Reply(tool_calls=(call(arguments='{"order_id": "#W1234567", "detail": "full"}'),))
    found = Reply(tool_calls=(call(arguments='{"order_id": "#W5555555", "detail": "full"}'),))
    sources = {"grounding": collect_sources(messages, False, failed),
               "identifier_pattern": re.compile(DEFAULT_PATTERN)}
    assert channels(echoed, **sources) == [Channel.UNGROUNDED_ENTITY]
    assert channels(found, **sources) == [Channel.OK]
    assert channels(echoed, **grounded_rules(messages)) == [Channel.OK]  # no pattern: as before
