"""History hygiene in each wire format: find the historical calls, check them, repair a copy.

Nothing here does I/O. This file says when each step runs; the walkers of each dialect's
conversation are history_chat.py, history_messages.py and history_responses.py. The HTTP
edge reads a request as before, then:

1. a bytes scan for the dialect's call marker (`"tool_calls"`, `"tool_use"`,
   `"function_call"`): a history without calls costs one `bytes.find`;
2. `needs_work`, on the body the reading already parsed: one pass over the conversation,
   one `orjson.loads` per historical call's arguments; a history whose calls are valid and
   answered costs that and nothing more;
3. only when something must change: `repaired` builds a repaired COPY (the parsed body is
   never changed: the `repair_*` functions return new containers along the changed path
   and share the rest) and serialises it, the tools list as the client's own bytes; the
   edge then reads those bytes instead.

Consistency of results with calls (docs/decisions.md, issue 22): a call with no result
before the conversation moves on gets a result saying so (the hosted APIs refuse such a
history with a 400, and a template renders it as a call answered by the next turn); a
result whose id matches no call, and duplicated ids, are passed as sent (vLLM and
llama-server render both; a hosted upstream's own 400 reaches the agent in its format).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from reflexguard.core.history import HistoryReport
from reflexguard.dialects.history_calls import Body
from reflexguard.dialects.history_chat import chat_needs_work, repair_chat
from reflexguard.dialects.history_messages import messages_needs_work, repair_messages
from reflexguard.dialects.history_responses import repair_responses, responses_needs_work

Repair = Callable[[Body], tuple[Body, HistoryReport]]
MARKERS = {"chat": b'"tool_calls"', "messages": b'"tool_use"', "responses": b'"function_call"'}


def has_calls(raw: bytes, dialect: str, skip: tuple[int, int] | None = None) -> bool:
    """The bytes scan: whether the request may carry a historical call at all. `skip`: the
    span of `raw` a chat request's tools list takes (ChatRequest.tools_span), which holds
    no historical call (`needs_work` reads the conversation, never the tools) and is most
    of an agent's request: scanning 11 KB of schemas for a marker they never hold cost
    more than reading the rest of the request (issue 23)."""
    marker = MARKERS.get(dialect)
    if marker is None:
        return False
    if skip is None:
        return raw.find(marker) >= 0
    # No marker straddles the span's ends: a list begins with [ and ends with ].
    return raw.find(marker, 0, skip[0]) >= 0 or raw.find(marker, skip[1]) >= 0


CHECKS: dict[str, Callable[[Body], bool]] = {
    "chat": chat_needs_work, "messages": messages_needs_work,
    "responses": responses_needs_work}


def needs_work(body: Body, dialect: str) -> bool:
    """The cheap check, on a body already parsed for reading: whether a historical call may
    need repair. A pass over the conversation with one `orjson.loads` per call's arguments;
    never a false "no" (tests/core/test_history.py holds it to the repair)."""
    check = CHECKS.get(dialect)
    return check is not None and check(body)






REPAIRS: dict[str, Repair] = {"chat": repair_chat, "messages": repair_messages,
                              "responses": repair_responses}


def clean_history(raw: bytes, dialect: str) -> tuple[bytes, HistoryReport]:
    """The bytes to forward for a request in `dialect`, and what was repaired: `raw`
    itself unless a historical call needed repair. A body that is not a JSON object is
    returned as it is, for the request's reading to refuse in the dialect's words. (The
    HTTP edge uses `repaired` on the body it has already parsed, which saves a parse.)"""
    if not has_calls(raw, dialect):
        return raw, HistoryReport()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw, HistoryReport()
    if not isinstance(body, dict):
        return raw, HistoryReport()
    fixed = repaired(body, dialect)
    if fixed is None:
        return raw, HistoryReport()
    return fixed[0], fixed[2]


def repaired(body: Body, dialect: str, tools_raw: bytes | None = None,
             ) -> tuple[bytes, Body, HistoryReport] | None:
    """(the bytes of `body` with its history repaired, that body, what was repaired), or
    None when nothing needs it. `tools_raw`: the tools list's bytes as the client sent
    them, where `body` holds null in its place (a chat request read by a split)."""
    if not needs_work(body, dialect):
        return None
    fixed, report = REPAIRS[dialect](body)
    if not report.changed:
        return None
    written = fixed
    if tools_raw is not None and "tools" in fixed:
        written = {**fixed, "tools": orjson.Fragment(tools_raw)}  # in its place, as sent
    try:
        return orjson.dumps(written), fixed, report
    except (TypeError, RecursionError):  # deeper than orjson writes: forwarded as sent
        return None
