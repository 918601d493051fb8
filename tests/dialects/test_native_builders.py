"""The dialects' re-asks, constrained attempts and error bodies, as pure functions."""

from __future__ import annotations

import copy
import json

import orjson

from reflexguard.core.channels import Channel
from reflexguard.core.model import CallVerdict, Reply, ToolCall, Verdict
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects import messages, responses
from tests.http.dialect_fixtures import anthropic_tools, messages_body, responses_body

TOOLSET = ToolSetCache().get(messages.chat_tools(anthropic_tools()))
BROKEN = Reply(content="Checking.", tool_calls=(ToolCall(id="c1", name="get_order_detail",
                                                         arguments='{"order_id": "#W1"}'),))
VERDICT = Verdict(calls=(CallVerdict(channel=Channel.UNKNOWN_TOOL, index=0,
                                     name="get_order_detail", detail="no such tool"),))
EMPTY = Verdict(calls=(CallVerdict(channel=Channel.EMPTY_REPLY),))


def test_messages_reask_appends_tool_use_and_error_results_without_mutating():
    body = messages_body(stream=True, thinking={"type": "adaptive"})
    snapshot = copy.deepcopy(body)
    reask = messages.reask(body, BROKEN, VERDICT, TOOLSET)
    assert body == snapshot and "stream" not in reask and reask["thinking"] == body["thinking"]
    assistant, user = reask["messages"][-2:]
    assert assistant["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "c1", "name": "get_order_detail",
         "input": {"order_id": "#W1"}}]
    assert user["content"][0]["is_error"] is True and user["content"][0]["tool_use_id"] == "c1"
    assert "get_order_details" in user["content"][0]["content"]


def test_messages_reask_of_an_empty_reply_never_sends_an_empty_block():
    reask = messages.reask(messages_body(), Reply(content=""), EMPTY, TOOLSET)
    assistant, user = reask["messages"][-2:]
    assert assistant["content"] == [{"type": "text", "text": "(no answer)"}]
    assert user["role"] == "user" and isinstance(user["content"], str)


def test_messages_constrain_keeps_disable_parallel_and_names_the_tool():
    body = messages_body(tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    forced = messages.constrain(body, "response_format", BROKEN, VERDICT, TOOLSET)
    assert forced["tool_choice"] == {"type": "tool", "name": "get_order_details",
                                     "disable_parallel_tool_use": True}
    assert body["tool_choice"]["type"] == "auto"
    assert messages.constrain(body, "off", BROKEN, VERDICT, TOOLSET) is body


def test_messages_tool_choice_and_server_tools_in_the_chat_view():
    body = messages_body(tool_choice={"type": "any", "disable_parallel_tool_use": True})
    body["tools"].append({"type": "web_search_20250305", "name": "web_search"})
    chat, dropped = messages.to_chat(body)
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_order_details",
                                                              "cancel_order"]
    assert "tool:web_search" in dropped


def test_anthropic_error_shape():
    body = orjson.loads(messages.error_body(400, "bad", "tools.0.input_schema", None))
    assert body == {"type": "error", "error": {"type": "invalid_request_error",
                                               "message": "tools.0.input_schema: bad"}}
    assert orjson.loads(messages.error_body(502, "x"))["error"]["type"] == "api_error"


def test_responses_reask_turns_a_string_input_into_items():
    body = responses_body(previous_response_id="resp_1")
    reask = responses.reask(body, BROKEN, VERDICT, TOOLSET)
    assert reask["previous_response_id"] == "resp_1" and body["input"] == responses_body()["input"]
    first, text, call, output = reask["input"]
    assert first == {"type": "message", "role": "user", "content": body["input"]}
    assert text["role"] == "assistant"
    assert call == {"type": "function_call", "call_id": "c1", "name": "get_order_detail",
                    "arguments": json.dumps({"order_id": "#W1"})}
    assert output["type"] == "function_call_output" and output["call_id"] == "c1"


def test_responses_constrain():
    body = responses_body()
    forced = responses.constrain(body, "tool_choice", BROKEN, VERDICT, TOOLSET)
    assert forced["tool_choice"] == {"type": "function", "name": "get_order_details"}
    nothing = Verdict(calls=(CallVerdict(channel=Channel.EMPTY_REPLY),))
    assert responses.constrain(body, "tool_choice", Reply(), nothing, TOOLSET)[
        "tool_choice"] == "required"
