"""Property tests: requests and answers keep their tools, calls, ids and text through
translation (requests native -> chat; answers chat -> native -> chat, both dialects)."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reflexguard.dialects import messages, responses

names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,20}", fullmatch=True)
ids = st.from_regex(r"[a-zA-Z0-9_]{1,24}", fullmatch=True)
texts = st.text(min_size=1, max_size=40).filter(lambda t: t.strip() != "")
scalars = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=10))
inputs = st.dictionaries(names, st.one_of(scalars, st.lists(scalars, max_size=3)), max_size=4)
schemas = st.just({"type": "object", "properties": {"a": {"type": "string"}}})


@st.composite
def calls(draw: Any) -> list[tuple[str, str, dict[str, Any]]]:
    found = draw(st.lists(st.tuples(ids, names, inputs), max_size=3,
                          unique_by=lambda c: c[0]))
    return list(found)


def chat_completion(text: str | None, found: list[tuple[str, str, dict[str, Any]]]
                    ) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if found:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {
            "name": n, "arguments": json.dumps(a)}} for i, n, a in found]
    return {"id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if found else "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}


def calls_of(completion: dict[str, Any]) -> list[tuple[str, str, Any]]:
    message = completion["choices"][0]["message"]
    return [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []]


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), texts), calls())
def test_messages_answer_survives_both_ways(text, found):
    completion = chat_completion(text, found)
    native = messages.native_of(completion, {"model": "m"}, None)
    back = messages.completion_of(native)
    assert back["choices"][0]["message"]["content"] == text
    assert calls_of(back) == calls_of(completion)
    assert back["usage"] == completion["usage"]
    assert native["stop_reason"] == ("tool_use" if found else "end_turn")


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), texts), calls())
def test_responses_answer_survives_both_ways(text, found):
    completion = chat_completion(text, found)
    native = responses.native_of(completion, {"model": "m"}, None)
    back = responses.completion_of(native)
    assert back["choices"][0]["message"]["content"] == text
    assert calls_of(back) == calls_of(completion)
    assert back["usage"] == completion["usage"]


@st.composite
def messages_requests(draw: Any) -> dict[str, Any]:
    tool_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    tools = [{"name": n, "description": draw(st.text(max_size=20)),
              "input_schema": draw(schemas)} for n in tool_names]
    conversation: list[dict[str, Any]] = [{"role": "user", "content": draw(texts)}]
    for _ in range(draw(st.integers(0, 3))):
        found = draw(calls())
        blocks: list[dict[str, Any]] = [{"type": "text", "text": draw(texts)}]
        blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in found]
        conversation.append({"role": "assistant", "content": blocks})
        results = [{"type": "tool_result", "tool_use_id": i, "content": draw(texts),
                    "is_error": draw(st.booleans())} for i, _, _ in found]
        conversation.append({"role": "user",
                             "content": results + [{"type": "text", "text": draw(texts)}]})
    system = draw(st.one_of(texts, st.lists(texts.map(lambda t: {"type": "text", "text": t,
                                                                 "cache_control": {
                                                                     "type": "ephemeral"}}),
                                            min_size=1, max_size=2)))
    return {"model": "m", "max_tokens": 64, "system": system, "messages": conversation,
            "tools": tools, "thinking": {"type": "adaptive"}}


@settings(max_examples=100, deadline=None)
@given(messages_requests())
def test_messages_request_keeps_tools_calls_ids_and_text(body):
    snapshot = copy.deepcopy(body)
    chat, dropped = messages.to_chat(body)
    assert body == snapshot  # never mutated
    assert "thinking" in dropped
    assert [(t["function"]["name"], t["function"]["parameters"]) for t in chat["tools"]] == \
        [(t["name"], t["input_schema"]) for t in body["tools"]]
    chat_calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                  for m in chat["messages"] for c in m.get("tool_calls") or []]
    native_calls = [(b["id"], b["name"], b["input"]) for m in body["messages"]
                    if isinstance(m["content"], list) for b in m["content"]
                    if b["type"] == "tool_use"]
    assert chat_calls == native_calls
    results = [m["tool_call_id"] for m in chat["messages"] if m["role"] == "tool"]
    assert results == [b["tool_use_id"] for m in body["messages"]
                       if isinstance(m["content"], list) for b in m["content"]
                       if b["type"] == "tool_result"]
    everything = "\n".join(str(m.get("content")) for m in chat["messages"])
    for message in body["messages"]:
        blocks = message["content"] if isinstance(message["content"], list) else [
            {"type": "text", "text": message["content"]}]
        for block in blocks:
            for text in (block.get("text"), block.get("content")):
                if isinstance(text, str):
                    assert text in everything


@st.composite
def responses_requests(draw: Any) -> dict[str, Any]:
    tool_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    tools: list[dict[str, Any]] = [{"type": "function", "name": n, "parameters": draw(schemas),
                                    "strict": False} for n in tool_names]
    tools.append({"type": "web_search"})
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": draw(texts)}]
    for _ in range(draw(st.integers(0, 3))):
        found = draw(calls())
        items += [{"type": "function_call", "call_id": i, "name": n,
                   "arguments": json.dumps(a)} for i, n, a in found]
        items += [{"type": "function_call_output", "call_id": i, "output": draw(texts)}
                  for i, _, _ in found]
    return {"model": "m", "instructions": draw(texts), "input": items, "tools": tools,
            "previous_response_id": "resp_1"}


@settings(max_examples=100, deadline=None)
@given(responses_requests())
def test_responses_request_keeps_tools_calls_ids_and_text(body):
    snapshot = copy.deepcopy(body)
    chat, dropped = responses.to_chat(body)
    assert body == snapshot
    assert "tool:web_search" in dropped and "previous_response_id" in dropped
    assert [t["function"]["name"] for t in chat["tools"]] == [
        t["name"] for t in body["tools"] if t["type"] == "function"]
    chat_calls = [(c["id"], c["function"]["name"], c["function"]["arguments"])
                  for m in chat["messages"] for c in m.get("tool_calls") or []]
    assert chat_calls == [(i["call_id"], i["name"], i["arguments"]) for i in body["input"]
                          if i["type"] == "function_call"]
    outputs = [(m["tool_call_id"], m["content"]) for m in chat["messages"]
               if m["role"] == "tool"]
    assert outputs == [(i["call_id"], i["output"]) for i in body["input"]
                       if i["type"] == "function_call_output"]
    assert chat["messages"][0] == {"role": "system", "content": body["instructions"]}
