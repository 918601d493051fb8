"""What agents send that llama-cpp-python's server refuses, against its own request model.

Each body below is one the OpenAI API accepts. The test first shows that llama-cpp-python's
`CreateChatCompletionRequest` (the pydantic model its server validates every chat request
with, the source of its 500s) refuses it, then that the normalised body passes the same
model, means the same thing, and is counted under the right kind; the caller's body is
never changed. The bodies the server merely ignores fields of pass through untouched.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reflexguard.dialects.llama_cpp import normalised

types = pytest.importorskip("llama_cpp.server.types")  # the embedded extra; CI installs it
ServerRequest = types.CreateChatCompletionRequest
ValidationError = pytest.importorskip("pydantic").ValidationError

CALL: dict[str, Any] = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
USER = {"role": "user", "content": "Weather in Oslo?"}


def body(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "embedded", "messages": [USER, *messages], "tools": [TOOL], **fields}


def parts(*texts: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": t} for t in texts]


# (what, the body, the kind counted, the field of the dumped request, what it must be)
REFUSED = [
    ("assistant content null with tool calls (LangChain, the Agents SDK)",
     body({"role": "assistant", "content": None, "tool_calls": [CALL]},
          {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}),
     "null_content", lambda d: d["messages"][1]["content"], ""),
    ("assistant content as parts",
     body({"role": "assistant", "content": parts("It is", "sunny.")}),
     "content_parts", lambda d: d["messages"][1]["content"], "It is\nsunny."),
    ("system content as parts",
     {"messages": [{"role": "system", "content": parts("Be brief.")}, USER]},
     "content_parts", lambda d: d["messages"][0]["content"], "Be brief."),
    ("tool content as parts",
     body({"role": "assistant", "content": "", "tool_calls": [CALL]},
          {"role": "tool", "tool_call_id": "call_1", "content": parts("sunny")}),
     "content_parts", lambda d: d["messages"][2]["content"], "sunny"),
    ("the developer role",
     {"messages": [{"role": "developer", "content": "Be brief."}, USER]},
     "developer_role", lambda d: d["messages"][0]["role"], "system"),
    ("tool_calls: null on an assistant message",
     body({"role": "assistant", "content": "Hello.", "tool_calls": None}),
     "null_field", lambda d: "tool_calls" in d["messages"][1], False),
    ("function_call: null on an assistant message",
     body({"role": "assistant", "content": "Hello.", "function_call": None}),
     "null_field", lambda d: "function_call" in d["messages"][1], False),
    ("temperature: null", body(temperature=None), "null_field",
     lambda d: d["temperature"], ServerRequest().temperature),
    ("top_p: null", body(top_p=None), "null_field", lambda d: d["top_p"],
     ServerRequest().top_p),
    ("stream: null", body(stream=None), "null_field", lambda d: d["stream"], False),
    ("a function tool without parameters",
     {"messages": [USER], "tools": [{"type": "function", "function": {"name": "now"}}]},
     "tool_parameters", lambda d: d["tools"][0]["function"]["parameters"],
     {"type": "object", "properties": {}}),
    ("a tool description: null",
     {"messages": [USER], "tools": [{"type": "function", "function": {
         "name": "now", "description": None, "parameters": {"type": "object"}}}]},
     "null_field", lambda d: "description" in d["tools"][0]["function"], False),
    ("response_format json_schema (structured outputs)",
     body(response_format={"type": "json_schema", "json_schema": {
         "name": "weather", "strict": True, "schema": {"type": "object"}}}),
     "json_schema_format", lambda d: d["response_format"],
     {"type": "json_object", "schema": {"type": "object"}}),
    ("a history tool call without type",
     body({"role": "assistant", "content": "", "tool_calls": [
         {"id": "call_1", "function": CALL["function"]}]}),
     "tool_call_type", lambda d: d["messages"][1]["tool_calls"][0]["type"], "function"),
    ("tool_choice allowed_tools",
     {"messages": [USER], "tools": [TOOL, {"type": "function", "function": {
         "name": "now", "parameters": {"type": "object"}}}],
      "tool_choice": {"type": "allowed_tools", "allowed_tools": {
          "mode": "required", "tools": [{"type": "function", "function": {"name": "now"}}]}}},
     "allowed_tools_choice", lambda d: (d["tool_choice"],
                                        [t["function"]["name"] for t in d["tools"]]),
     ("required", ["now"])),
]


@pytest.mark.parametrize("what, request_body, kind, read, expected", REFUSED,
                         ids=[case[0] for case in REFUSED])
def test_a_body_the_server_refuses_is_normalised_into_one_it_accepts(
        what: str, request_body: dict[str, Any], kind: str, read: Any, expected: Any) -> None:
    with pytest.raises(ValidationError):
        ServerRequest.model_validate(request_body)
    before = copy.deepcopy(request_body)
    fixed, changes = normalised(request_body)
    assert request_body == before, "the caller's body was changed"
    assert kind in changes, changes
    accepted = ServerRequest.model_validate(fixed).model_dump()
    assert read(accepted) == expected


def test_max_completion_tokens_is_ignored_there_so_it_becomes_max_tokens() -> None:
    request_body = body(max_completion_tokens=64)
    assert ServerRequest.model_validate(request_body).max_tokens is None  # unbounded there
    fixed, changes = normalised(request_body)
    assert changes == {"max_completion_tokens": ["max_completion_tokens"]}
    assert ServerRequest.model_validate(fixed).max_tokens == 64
    both, changes = normalised(body(max_tokens=10, max_completion_tokens=64))
    assert ServerRequest.model_validate(both).max_tokens == 10 and not changes


# Fields the server's models do not declare: ignored there (pydantic's default), so the
# body is accepted and must be sent as it is, byte for byte.
IGNORED = [
    body(parallel_tool_calls=False, stream_options={"include_usage": True}, store=False,
         metadata={"run": "1"}, reasoning_effort="low", service_tier="auto", n=None,
         stop=None, seed=None, user="u-1"),
    {"messages": [USER], "tools": [{**TOOL, "function": {**TOOL["function"], "strict": True}}]},
    body({"role": "assistant", "content": "", "tool_calls": [CALL], "refusal": None,
          "name": "agent"},
         {"role": "tool", "tool_call_id": "call_1", "content": "sunny", "name": "get_weather"}),
    {"messages": [{"role": "user", "content": parts("a", "b"), "name": "alice"}]},
    body({"role": "assistant", "tool_calls": [CALL]},
         {"role": "tool", "tool_call_id": "call_1", "content": None}),
]


@pytest.mark.parametrize("request_body", IGNORED)
def test_what_the_server_accepts_is_sent_unchanged(request_body: dict[str, Any]) -> None:
    ServerRequest.model_validate(request_body)
    fixed, changes = normalised(request_body)
    assert fixed is request_body and changes == {}


def test_every_change_of_one_body_is_named_where_it_happened() -> None:
    request_body: dict[str, Any] = {
        "messages": [{"role": "developer", "content": parts("a")}, USER,
                     {"role": "assistant", "content": None, "tool_calls": [CALL]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                     {"role": "assistant", "content": None, "tool_calls": [CALL]}],
        "temperature": None}
    fixed, changes = normalised(request_body)
    assert changes == {"developer_role": ["messages[0].role"],
                       "content_parts": ["messages[0].content"],
                       "null_content": ["messages[2].content", "messages[4].content"],
                       "null_field": ["temperature"]}
    ServerRequest.model_validate(fixed)
    assert fixed["messages"][3] is request_body["messages"][3]  # untouched: shared, not copied
