"""POST /v1/responses end to end: the official openai SDK -> reflexguard -> a scripted
native Responses upstream (or a chat-only one, translated), all on loopback sockets."""

from __future__ import annotations

import copy
import json
from typing import Any

import openai
import pytest

from tests.fakes.fake_upstream import Scripted, text_completion, tool_call_completion
from tests.fakes.native_replies import function_call, message_item, openai_response
from tests.http.dialect_fixtures import GOOD, responses_body


def sdk(client: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="dummy",
                              max_retries=0)


def valid() -> Scripted:
    return Scripted(openai_response(function_call("get_order_details", GOOD)))


def broken() -> Scripted:
    return Scripted(openai_response(function_call("get_order_details", '{"order_id": ')))


async def test_valid_call_is_the_upstreams_own_bytes(fake, proxy):
    upstream, _ = fake
    upstream.script = [valid()]
    client = await proxy()
    response = await client.post("/v1/responses", json=responses_body())
    assert response.status == 200 and upstream.paths == ["/v1/responses"]
    assert json.loads(await response.read()) == openai_response(
        function_call("get_order_details", GOOD))


async def test_sdk_create_gets_the_call(fake, proxy):
    upstream, _ = fake
    upstream.script = [valid()]
    response = await sdk(await proxy()).responses.create(**responses_body())
    call = response.output[0]
    assert call.type == "function_call" and call.name == "get_order_details"
    assert json.loads(call.arguments) == GOOD


async def test_malformed_arguments_are_reasked_with_function_call_output(fake, proxy):
    upstream, _ = fake
    upstream.script = [broken(), valid()]
    body = responses_body(previous_response_id="resp_earlier", store=False,
                          reasoning={"summary": "auto"})
    snapshot = copy.deepcopy(body)
    response = await sdk(await proxy()).responses.create(**body)
    assert body == snapshot and upstream.calls == 2
    assert json.loads(response.output[0].arguments) == GOOD
    assert response.usage is not None and response.usage.input_tokens == 20
    reask = upstream.requests[1]
    assert reask["previous_response_id"] == "resp_earlier"  # passed through untouched
    assert reask["reasoning"] == {"summary": "auto"}
    failed, feedback = reask["input"][-2:]
    assert reask["input"][0] == {"type": "message", "role": "user",
                                 "content": body["input"]}
    assert failed["type"] == "function_call" and failed["call_id"] == "call_1"
    assert feedback["type"] == "function_call_output" and feedback["call_id"] == "call_1"
    assert "JSON" in feedback["output"]


async def test_vanished_call_repaired_and_counted_per_dialect(fake, proxy):
    upstream, _ = fake
    text = json.dumps({"name": "get_order_details", "arguments": GOOD})
    upstream.script = [Scripted(openai_response(message_item(text))), valid()]
    client = await proxy()
    response = await sdk(client).responses.create(**responses_body())
    assert [item.type for item in response.output] == ["function_call"]
    metrics = await (await client.get("/metrics")).text()
    assert 'channel="vanished_call",dialect="responses",model="m"} 1.0' in metrics
    assert 'repairs_total{dialect="responses",outcome="fixed_by_reask"} 1.0' in metrics


async def test_constrained_attempt_names_the_function(fake, proxy):
    upstream, _ = fake
    upstream.script = [broken(), valid()]
    await sdk(await proxy(max_repairs=1, constrained_retry="tool_choice")).responses.create(
        **responses_body())
    assert upstream.requests[1]["tool_choice"] == {"type": "function",
                                                   "name": "get_order_details"}


async def test_exhausted_is_an_openai_error(fake, proxy):
    upstream, _ = fake
    upstream.default = broken()
    with pytest.raises(openai.APIStatusError) as caught:
        await sdk(await proxy(on_exhausted="error")).responses.create(**responses_body())
    assert caught.value.status_code == 502
    assert caught.value.code == "tool_call_repair_exhausted"


async def test_builtin_and_namespace_tools(fake, proxy):
    """Codex sends a namespace of nested function tools and a schemaless web_search."""
    upstream, _ = fake
    upstream.script = [Scripted(openai_response(function_call("close_agent", {"id": "a1"})))]
    body = responses_body()
    body["tools"] += [{"type": "web_search"}, {"type": "namespace", "name": "multi_agent_v1",
                                                "tools": [{"type": "function",
                                                           "name": "close_agent",
                                                           "parameters": {"type": "object"},
                                                           "strict": False}]}]
    client = await proxy()
    response = await client.post("/v1/responses", json=body)
    assert response.status == 200 and response.headers["x-reflexguard-violations"] == "0"
    assert upstream.requests[0]["tools"] == body["tools"]


async def test_malformed_parameters_is_an_openai_400(fake, proxy):
    body = responses_body()
    body["tools"][0]["parameters"] = {"type": "nonsense"}
    response = await (await proxy()).post("/v1/responses", json=body)
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["param"] == "tools[0].parameters" and "get_order_details" in error["message"]


@pytest.mark.parametrize("script", ["valid", "repaired"])
async def test_sdk_stream_accepts_held_and_repaired_calls(fake, proxy, script):
    upstream, _ = fake
    upstream.script = [valid()] if script == "valid" else [broken(), valid()]
    stream = await sdk(await proxy()).responses.create(**responses_body(), stream=True)
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    done = [e for e in events if e.type == "response.output_item.done"][-1]
    assert json.loads(done.item.arguments) == GOOD
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_stream_text_at_once_then_repaired_call(fake, proxy):
    upstream, _ = fake
    first = openai_response(message_item("Looking it up now."),
                            function_call("get_order_details", '{"order_id": '))
    upstream.script = [Scripted(first), valid()]
    async with sdk(await proxy()).responses.stream(**responses_body()) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert len(deltas) > 1 and "".join(deltas) == "Looking it up now."
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert json.loads(final.output[1].arguments) == GOOD
    assert upstream.requests[0]["stream"] is True and "stream" not in upstream.requests[1]


async def test_sdk_stream_helper_text(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(openai_response(message_item("Hello there.")))]
    async with sdk(await proxy()).responses.stream(**responses_body()) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == "Hello there." and final.output_text == "Hello there."


async def test_translated_responses(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(tool_call_completion("get_order_details", '{"order_id": ')),
                       Scripted(tool_call_completion("get_order_details", GOOD))]
    client = await proxy(upstream_dialects=["chat"])
    body = responses_body(input=[
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                         "text": "Order #W1234567?"}]}])
    response = await sdk(client).responses.create(**body)
    assert upstream.paths == ["/v1/chat/completions"] * 2
    assert upstream.requests[0]["messages"][:2] == [
        {"role": "system", "content": "You are a retail agent."},
        {"role": "system", "content": "Be brief."}]
    assert json.loads(response.output[0].arguments) == GOOD
    stream = await sdk(client).responses.create(**body, stream=True)
    assert [e.type async for e in stream][-1] == "response.completed"


async def test_request_without_tools_passes_through_natively(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(openai_response(message_item("Hi.")))]
    body = responses_body()
    del body["tools"]
    response = await sdk(await proxy()).responses.create(**body)
    assert response.output_text == "Hi." and upstream.requests == [body]


async def test_unreachable_upstream_is_an_openai_error(proxy):
    client = await proxy(upstream="http://127.0.0.1:9/v1")
    response = await client.post("/v1/responses", json=responses_body())
    assert response.status == 502
    assert (await response.json())["error"]["code"] == "upstream_error"


async def test_translated_stream_without_tools(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(text_completion("Plain answer here."))]
    body = responses_body()
    del body["tools"]
    client = await proxy(upstream_dialects=["chat"])
    async with sdk(client).responses.stream(**body) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert len(deltas) > 1 and final.output_text == "Plain answer here."
