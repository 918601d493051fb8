"""Every channel in both new dialects: classified, counted with its dialect, repaired."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.fake_upstream import Scripted
from tests.fakes.native_replies import (
    anthropic_call,
    anthropic_message,
    function_call,
    message_item,
    openai_response,
    text_block,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

VANISHED = json.dumps({"name": "get_order_details", "arguments": GOOD})
# channel -> (arguments or None for a text reply, tool name, text, extra request fields)
CASES: dict[str, tuple[Any, str, str, dict[str, Any]]] = {
    "unknown_tool": (GOOD, "get_order_detail", "", {}),
    "malformed_args": ('{"order_id": ', "get_order_details", "", {}),
    "schema_violation": ({"order_id": "#W1234567"}, "get_order_details", "", {}),
    "vanished_call": (None, "", VANISHED, {}),
    "empty_reply": (None, "", "", {}),
    "ungrounded_entity": ({"order_id": "#W7654321", "detail": "full"}, "get_order_details",
                          "", {}),
}


def native(dialect: str, arguments: Any, name: str, text: str) -> dict[str, Any]:
    if dialect == "messages":
        if arguments is None:
            return anthropic_message(*([text_block(text)] if text else []))
        return anthropic_call(name, arguments)
    if arguments is None:
        return openai_response(*([message_item(text)] if text else []))
    return openai_response(function_call(name, arguments))


def valid(dialect: str) -> Scripted:
    return Scripted(native(dialect, GOOD, "get_order_details", ""))


@pytest.mark.parametrize("dialect", ["messages", "responses"])
@pytest.mark.parametrize("channel", sorted(CASES))
async def test_channel_is_counted_and_repaired(fake, proxy, dialect, channel):
    upstream, _ = fake
    arguments, name, text, _ = CASES[channel]
    if dialect == "messages" and channel == "malformed_args":
        arguments = "not an object"  # tool_use input is parsed JSON: a non-object is malformed
    upstream.script = [Scripted(native(dialect, arguments, name, text)), valid(dialect)]
    settings: dict[str, Any] = {"grounding": channel == "ungrounded_entity"}
    client = await proxy(**settings)
    if dialect == "messages":
        body = messages_body(tool_choice={"type": "any"})
        response = await client.post("/v1/messages", json=body)
    else:
        body = responses_body(tool_choice="required")
        response = await client.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    assert response.headers["x-reflexguard-attempts"] == "2"
    metrics = await (await client.get("/metrics")).text()
    assert f'channel="{channel}",dialect="{dialect}",model="m"}} 1.0' in metrics
    answer = await response.json()
    if dialect == "messages":
        assert answer["content"][-1]["input"] == GOOD
    else:
        assert json.loads(answer["output"][-1]["arguments"]) == GOOD


@pytest.mark.parametrize("dialect", ["messages", "responses"])
async def test_choice_violation(fake, proxy, dialect):
    upstream, _ = fake
    upstream.script = [valid(dialect), Scripted(native(dialect, {"order_id": "#W1234567"},
                                                       "cancel_order", ""))]
    client = await proxy()
    if dialect == "messages":
        body = messages_body(tool_choice={"type": "tool", "name": "cancel_order"})
        response = await client.post("/v1/messages", json=body)
    else:
        body = responses_body(tool_choice={"type": "function", "name": "cancel_order"})
        response = await client.post("/v1/responses", json=body)
    assert response.status == 200 and response.headers["x-reflexguard-attempts"] == "2"
    metrics = await (await client.get("/metrics")).text()
    assert f'channel="choice_violation",dialect="{dialect}",model="m"}} 1.0' in metrics


async def test_claude_code_session_header_and_on_exhausted_original(fake, proxy):
    upstream, _ = fake
    first = anthropic_call("get_order_detail", GOOD)
    upstream.script = [Scripted(first)]
    # a different invalid call (an identical one would be a repeat and stop the ladder)
    upstream.default = Scripted(anthropic_call("get_order_detail2", GOOD, call_id="toolu_2"))
    client = await proxy(on_exhausted="original")
    response = await client.post("/v1/messages", json=messages_body(),
                                 headers={"X-Claude-Code-Session-Id": "cc-42"})
    assert response.status == 200 and upstream.calls == 3
    assert json.loads(await response.read()) == first  # the first answer, as it came
    counts = await (await client.get("/reflexguard/sessions/cc-42")).json()
    assert counts["violations"] == {"unknown_tool": 3}


async def test_codex_session_header(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(openai_response(function_call("nope", GOOD))), valid("responses")]
    client = await proxy()
    await client.post("/v1/responses", json=responses_body(), headers={"session-id": "cx-1"})
    counts = await (await client.get("/reflexguard/sessions/cx-1")).json()
    assert counts["violations"] == {"unknown_tool": 1}
