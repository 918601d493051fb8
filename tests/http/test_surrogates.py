"""A lone UTF-16 surrogate in a model's arguments (issue 30, item 1), through the proxy on
every route, streamed and not, native and translated: the call is re-asked (the model's
malformed_args), never passed to the agent as valid.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.native_replies import anthropic_call, function_call, openai_response
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body
from tests.http.test_stream_fields import sse_proxy  # noqa: F401 -- the fixture

LONE = '{"order_id": "#W1234567", "detail": "\\ud800"}'  # half an emoji, as JSON text
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
         "responses": "/v1/responses"}
BODIES = {"chat": chat_body, "messages": messages_body, "responses": responses_body}


def answers(dialect: str, native: bool) -> list[Scripted]:
    """The broken call, then the valid one the re-ask gets."""
    if not native or dialect == "chat":
        return [Scripted(tool_call_completion("get_order_details", LONE)),
                Scripted(tool_call_completion("get_order_details", GOOD))]
    if dialect == "messages":
        # Messages carries input as an object: the surrogate sits in the body's own JSON.
        return [Scripted(anthropic_call("get_order_details", {"order_id": "#W1234567",
                                                               "detail": "\ud800"})),
                Scripted(anthropic_call("get_order_details", GOOD))]
    return [Scripted(openai_response(function_call("get_order_details", LONE))),
            Scripted(openai_response(function_call("get_order_details", GOOD)))]


CASES = [(dialect, stream, native) for dialect in PATHS for stream in (False, True)
         for native in ((True,) if dialect == "chat" else (True, False))]


@pytest.mark.parametrize(("dialect", "stream", "native"), CASES)
async def test_a_lone_surrogate_in_the_arguments_is_re_asked_on_every_route(
        fake: Any, proxy: Any, dialect: str, stream: bool, native: bool) -> None:
    upstream, _ = fake
    upstream.script = answers(dialect, native)
    client = await proxy(upstream_dialects=list(PATHS) if native else ["chat"])
    response = await client.post(PATHS[dialect], json=BODIES[dialect](stream=stream))
    text = await response.text()
    assert response.status == 200, text[:300]
    assert upstream.calls == 2, "the broken call was passed on without a re-ask"
    assert "\\ud800" not in text and "full" in text, text[-400:]


def sse(data: dict[str, Any], name: str | None = None) -> bytes:
    """An event as a server whose JSON encoder escapes a lone surrogate writes it."""
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


TEXT = "Half an emoji: \ud83d and on"  # a lone high surrogate in the model's text


def text_events(dialect: str) -> list[bytes]:
    if dialect == "messages":
        message = {"id": "msg_1", "type": "message", "role": "assistant",
                   "model": "simulated", "content": [], "stop_reason": None,
                   "usage": {"input_tokens": 1, "output_tokens": 0}}
        return [sse({"type": "message_start", "message": message}, "message_start"),
                sse({"type": "content_block_start", "index": 0,
                     "content_block": {"type": "text", "text": ""}}, "content_block_start"),
                sse({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": TEXT}}, "content_block_delta"),
                sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
                sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                     "usage": {"output_tokens": 5}}, "message_delta"),
                sse({"type": "message_stop"}, "message_stop")]
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "simulated"}
    return [sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                            "content": TEXT},
                                      "finish_reason": None}]}),
            sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            b"data: [DONE]\n\n"]


@pytest.mark.parametrize(("dialect", "native"), [("chat", True), ("messages", True),
                                                 ("messages", False), ("responses", False)])
async def test_a_lone_surrogate_in_streamed_text_reaches_the_agent(
        sse_proxy: Any, dialect: str, native: bool) -> None:  # noqa: F811
    """Never worse than no guard: the agent's decoder reads the escaped half character,
    so the guard passes it on as the upstream wrote it, never dropping the text."""
    client = await sse_proxy(text_events(dialect if native else "chat"),
                             upstream_dialects=list(PATHS) if native else ["chat"])
    response = await client.post(PATHS[dialect], json=BODIES[dialect](stream=True))
    text = await response.text()
    assert response.status == 200, text[:300]
    assert "Half an emoji" in text and "\\ud83d" in text, text[-600:]
    assert "event: error" not in text and not any(
        opened in text for opened in ('"error":{', '"error": {')), text[-600:]
