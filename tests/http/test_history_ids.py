"""Historical call ids of every JSON type (issue 30, item 3): arrays, objects, numbers,
null, booleans and strings as ids of calls and results, on every route, with tools and
without, streamed and not, native and translated. Never a 500: the history goes to the
server as the client sent it (the server decides what such an id means), and the answer
comes back; an unanswered call with an odd id still gets its result, paired by JSON text.
"""

from __future__ import annotations

from typing import Any

import pytest

from reflexguard.core.history import id_key
from reflexguard.dialects.history import needs_work
from reflexguard.dialects.history_chat import repair_chat
from reflexguard.dialects.history_messages import repair_messages
from reflexguard.dialects.history_responses import repair_responses
from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, text_completion
from tests.fakes.native_replies import anthropic_message, message_item, openai_response, text_block
from tests.http.dialect_fixtures import ASK, messages_body, responses_body

ODD_IDS: list[Any] = [["a"], {"a": 1}, 7, 1.5, None, True, "", [], {}, [[["deep"]]]]
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
         "responses": "/v1/responses"}


def history(dialect: str, call_id: Any, result_id: Any, tools: bool = True) -> dict[str, Any]:
    if dialect == "chat":
        body = chat_body(messages=[
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": {
                    "name": "get_order_details", "arguments": '{"order_id": "#W1"}'}}]},
            {"role": "tool", "tool_call_id": result_id, "content": "shipped"},
            {"role": "user", "content": "Thanks. And now?"}])
    elif dialect == "messages":
        body = messages_body(messages=[
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call_id,
                                               "name": "get_order_details",
                                               "input": {"order_id": "#W1"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": result_id,
                                          "content": "shipped"},
                                         {"type": "text", "text": "Thanks. And now?"}]}])
    else:
        body = responses_body(input=[
            {"type": "message", "role": "user", "content": ASK},
            {"type": "function_call", "call_id": call_id, "name": "get_order_details",
             "arguments": '{"order_id": "#W1"}'},
            {"type": "function_call_output", "call_id": result_id, "output": "shipped"},
            {"type": "message", "role": "user", "content": "Thanks. And now?"}])
    if not tools:
        body.pop("tools")
    return body


def answer(dialect: str, native: bool) -> Scripted:
    text = "It is on its way (simulated)."
    if not native or dialect == "chat":
        return Scripted(text_completion(text))
    if dialect == "messages":
        return Scripted(anthropic_message(text_block(text)))
    return Scripted(openai_response(message_item(text)))


CASES = [(dialect, tools, stream, native)
         for dialect in PATHS for tools in (True, False) for stream in (False, True)
         for native in ((True,) if dialect == "chat" else (True, False))]


@pytest.mark.parametrize(("dialect", "tools", "stream", "native"), CASES)
async def test_odd_ids_are_forwarded_as_sent_and_never_a_500(
        fake: Any, proxy: Any, dialect: str, tools: bool, stream: bool, native: bool) -> None:
    upstream, _ = fake
    upstream.default = lambda _: answer(dialect, native)
    client = await proxy(upstream_dialects=list(PATHS) if native else ["chat"])
    for odd in ODD_IDS:
        body = history(dialect, odd, odd, tools)
        body["stream"] = stream
        response = await client.post(PATHS[dialect], json=body)
        text = await response.text()
        assert response.status == 200, (odd, text[:300])
        # A stream cuts the text into deltas: there, no error event instead.
        assert "simulated" in text if not stream else (
            "event: error" not in text and '"error":{' not in text), (odd, text[:300])
    if native:  # as the client sent them: the server judges what an id means
        sent = upstream.requests[-1]
        field = {"chat": lambda b: b["messages"][1]["tool_calls"][0]["id"],
                 "messages": lambda b: b["messages"][1]["content"][0]["id"],
                 "responses": lambda b: b["input"][1]["call_id"]}[dialect]
        assert field(sent) == ODD_IDS[-1]


@pytest.mark.parametrize("odd", ODD_IDS)
def test_odd_ids_pair_by_their_json_text(odd: Any) -> None:
    """An answered call with an odd id needs no work; a result with an id that only looks
    alike (`1` for `true`, `"7"` for `7`) does not answer it, so the call gets a result."""
    for dialect, repair in (("chat", repair_chat), ("messages", repair_messages),
                            ("responses", repair_responses)):
        assert not needs_work(history(dialect, odd, odd), dialect), (dialect, odd)
        other = "x" if odd != "x" else "y"
        body = history(dialect, odd, other)
        assert needs_work(body, dialect)
        fixed, report = repair(body)
        assert "missing_result" in report.kinds, (dialect, odd, report.kinds)
        assert fixed is not body and body == history(dialect, odd, other)  # a copy


def test_id_keys_keep_json_types_apart() -> None:
    keys = [id_key(v) for v in (1, True, "1", 1.0, None, "null", [1], "[1]", {"a": 1})]
    assert len({repr(k) for k in keys}) == len(keys)
    assert id_key({"b": 1, "a": 2}) == id_key({"a": 2, "b": 1})  # JSON text, sorted keys
    assert id_key("call_1") == "call_1"  # strings, the common case, as themselves
