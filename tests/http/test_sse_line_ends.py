"""SSE lines end in CRLF, LF or a bare CR (issue 30, item 5; WHATWG HTML, "Parsing an
event stream"): the splitter reads all three, across network chunks, and a guarded stream
of each dialect whose upstream ends its lines in a bare CR is answered whole."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from reflexguard.http.sse import SseLines
from tests.conftest import chat_body
from tests.fakes.native_replies import (
    anthropic_call,
    anthropic_stream,
    function_call,
    openai_response,
    responses_stream,
)
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body
from tests.http.test_stream_bounds import chat_call_events
from tests.http.test_stream_fields import sse_proxy  # noqa: F401 -- the fixture

LINES = [b"event: a", b"data: {\"x\": 1}", b"", b"data: [DONE]", b""]
ENDS = [b"\n", b"\r\n", b"\r"]


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    splitter = SseLines(1 << 20)
    out: list[bytes] = []
    at = 0
    for cut in sorted({min(c, len(body)) for c in cuts}) + [len(body)]:
        out += splitter.feed(body[at:cut])
        at = cut
    if rest := splitter.rest():
        out.append(rest)
    return out


@pytest.mark.parametrize("end", ENDS)
def test_each_line_end_splits_the_same_lines(end: bytes) -> None:
    body = end.join(LINES) + end
    assert split(body, []) == LINES


@given(ends=st.lists(st.sampled_from(ENDS), min_size=len(LINES), max_size=len(LINES)),
       cuts=st.lists(st.integers(0, 60), max_size=8))
def test_mixed_line_ends_cut_anywhere_give_the_same_lines(ends: list[bytes],
                                                          cuts: list[int]) -> None:
    """A CRLF cut between its CR and its LF is still one line end."""
    body = b"".join(line + end for line, end in zip(LINES, ends, strict=True))
    # A bare CR, then an empty line ended by LF, is a CRLF by the grammar: not this case.
    assume(all(not (a == b"\r" and not LINES[i + 1] and b[:1] == b"\n")
               for i, (a, b) in enumerate(pairwise(ends))))
    assert split(body, cuts) == LINES


def with_bare_cr(events: list[bytes]) -> list[bytes]:
    return [event.replace(b"\n", b"\r") for event in events]


async def test_a_chat_stream_with_bare_cr_lines_is_answered(
        sse_proxy: Any) -> None:  # noqa: F811
    client = await sse_proxy(with_bare_cr(chat_call_events(json.dumps(GOOD))))
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    text = await response.text()
    assert response.status == 200, text[:300]
    assert "get_order_details" in text and text.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("dialect", ["messages", "responses"])
async def test_a_native_stream_with_bare_cr_lines_is_answered(
        sse_proxy: Any, dialect: str) -> None:  # noqa: F811
    if dialect == "messages":
        events = anthropic_stream(anthropic_call("get_order_details", GOOD))
        path, body = "/v1/messages", messages_body(stream=True)
    else:
        events = responses_stream(openai_response(function_call("get_order_details", GOOD)))
        path, body = "/v1/responses", responses_body(stream=True)
    client = await sse_proxy(with_bare_cr(events))
    response = await client.post(path, json=body)
    text = await response.text()
    assert response.status == 200, text[:300]
    assert "get_order_details" in text
    assert "message_stop" in text if dialect == "messages" else "response.completed" in text
