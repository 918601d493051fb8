"""What every fuzz case must satisfy, and how one case is run against the harness.

The properties are listed in `test_fuzz_app.py`; `check` asserts them one by one, so
hypothesis reports each broken property as its own bug.
"""

from __future__ import annotations

import gc
import itertools
import json
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from hypothesis import note
from hypothesis.control import currently_in_test_context

from tests.http.fuzz.harness import Exchange, Harness, Scene, Seen, http_request
from tests.http.fuzz.strategies import CANARY, MARKERS

SECRET = "fuzz-SECRET-pw-7f3a"  # the password in one profile's upstream URL
PROBE_BOUND = 0.100  # seconds; a probe this slow is sent again, to tell load from a block
# Past this the loop was blocked, whatever the machine was doing: a correctness bound, not
# a benchmark (a 169 KB streamed answer legitimately holds the loop >100 ms at load 4).
BLOCKED_BOUND = 1.0
CASE_TIMEOUT = 30.0
JSON_HEADERS = ((b"Content-Type", b"application/json"),)


@dataclass(frozen=True)
class Case:
    profile: str
    body: bytes = b""
    method: str = "POST"
    path: str = "/v1/chat/completions"
    headers: tuple[tuple[bytes, bytes], ...] = JSON_HEADERS
    plan: tuple[Scene, ...] = ()
    expect: tuple[int, ...] = ()  # the statuses allowed, when the case has a right answer
    expect_text: str | None = None  # must appear in the error message
    guarded: bool = False  # a valid request with tools: its 200 is a completion or a stream
    stream: bool = False
    client_messages: int = 0
    dialect: str = "chat"  # "messages" / "responses": errors and streams in that grammar
    pieces: int = 1  # > 1: a slow client, the request written in pieces `gap` s apart
    gap: float = 0.0

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 400 else self.body[:400] + b"..."
        return (f"Case(profile={self.profile!r}, {self.method} {self.path!r}, "
                f"headers={self.headers!r}, body[{len(self.body)}]={body!r}, "
                f"plan=[{', '.join(s.short() for s in self.plan)}], expect={self.expect}, "
                f"expect_text={self.expect_text!r})")


@dataclass(frozen=True)
class Outcome:
    exchange: Exchange
    seen: list[Seen]
    worst_probe: float
    sent_500: bool
    canary_hits: list[bytes]
    foreign: list[str]


def _send(harness: Harness, case: Case, request: bytes) -> tuple[Exchange, float]:
    assert harness.prober is not None
    harness.fake.begin(case.plan)
    # Hypothesis's example tree makes this process's heap large enough that a gen-2
    # collection stops every thread, the proxy's too, for ~100 ms. Collections wait until
    # the case is answered, so the prober times reflexguard, not the harness.
    gc.disable()
    try:
        started = time.perf_counter()
        exchange = harness.send(case.profile, request, case.method, CASE_TIMEOUT,
                                case.pieces, case.gap)
        ended = time.perf_counter()
    finally:
        gc.enable()
    return exchange, harness.prober.worst_during(started, ended)


def run(harness: Harness, case: Case) -> Outcome:
    assert harness.audit is not None and harness.prober is not None
    if harness.dead is not None:
        raise AssertionError(f"the proxy stopped answering on an earlier case: {harness.dead}")
    hits, foreign = len(harness.canary.hits), len(harness.audit.foreign)
    body = case.body.replace(CANARY.encode(), str(harness.canary.port).encode())
    request = http_request(case.method, case.path, case.headers, body)
    exchange, worst = _send(harness, case, request)
    if exchange.fault and exchange.fault.startswith("no complete answer"):
        harness.dead = repr(case)
    elif PROBE_BOUND <= worst < BLOCKED_BOUND:
        # A shared machine stalls a probe now and then; an input that blocks the loop
        # blocks it every time. The same case again tells the two apart (canary hits and
        # foreign connections of both sends count).
        exchange, again = _send(harness, case, request)
        worst = min(worst, again)
    harness.worst_in_flight = max(harness.worst_in_flight, worst)
    harness.cases += 1
    return Outcome(exchange, list(harness.fake.seen), worst, harness.fake.sent_500,
                   harness.canary.hits[hits:], harness.audit.foreign[foreign:])


def error_of(body: bytes) -> dict[str, Any]:
    """The OpenAI-format error in `body`; fails the case if it is not one."""
    try:
        parsed = json.loads(body)
    except ValueError:
        raise AssertionError(f"error body is not JSON: {body[:300]!r}") from None
    assert isinstance(parsed, dict) and isinstance(parsed.get("error"), dict), (
        f"error body is not {{'error': {{...}}}}: {body[:300]!r}")
    error: dict[str, Any] = parsed["error"]
    missing = {"message", "type", "param", "code"} - set(error)
    assert not missing, f"error lacks {sorted(missing)}: {body[:300]!r}"
    assert isinstance(error["message"], str), f"error message is not a string: {body[:300]!r}"
    assert "Traceback" not in error["message"]
    return error


def dialect_error_of(body: bytes, dialect: str) -> dict[str, Any]:
    """The error in `body` in the dialect's format: Anthropic's on Messages
    (`{"type": "error", "error": {"type", "message"}}`), OpenAI's elsewhere."""
    if dialect != "messages":
        return error_of(body)
    try:
        parsed = json.loads(body)
    except ValueError:
        raise AssertionError(f"error body is not JSON: {body[:300]!r}") from None
    assert isinstance(parsed, dict) and parsed.get("type") == "error", (
        f"not an Anthropic error: {body[:300]!r}")
    error = parsed.get("error")
    assert isinstance(error, dict) and isinstance(error.get("type"), str) and isinstance(
        error.get("message"), str), f"not an Anthropic error: {body[:300]!r}"
    assert "Traceback" not in error["message"]
    return error


MESSAGES_ENDS = ("message_stop", "error")
RESPONSES_ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


def native_sse_fault(exchange: Exchange, dialect: str) -> str | None:
    """Why a guarded Messages or Responses 200 stream is not well formed: every event named
    (`event:` then `data:` + a JSON object whose `type` is that name), none after the end,
    and ending with the dialect's own end or error event, never a chat-format line."""
    if not exchange.headers.get("content-type", "").startswith("text/event-stream"):
        return f"a streamed answer with Content-Type {exchange.headers.get('content-type')!r}"
    try:
        text = exchange.body.decode()
    except UnicodeDecodeError:
        return "the stream is not UTF-8"
    if not text.endswith("\n\n"):
        return f"the stream does not end on an event boundary: {text[-200:]!r}"
    ends = MESSAGES_ENDS if dialect == "messages" else RESPONSES_ENDS
    last = None
    for index, event in enumerate(e for e in text.split("\n\n") if e.strip()):
        name, _, data = event.partition("\n")
        if not name.startswith("event: ") or not data.startswith("data: "):
            return f"event {index} is not a named event: {event[:200]!r}"
        if last in ends:
            return f"event after the end ({last}): {event[:200]!r}"
        try:
            value = json.loads(data.removeprefix("data: "))
        except ValueError:
            return f"event {index} is not JSON: {data[:200]!r}"
        name = name.removeprefix("event: ")
        if not isinstance(value, dict) or value.get("type") != name:
            return f"event {index} named {name!r} carries {data[:200]!r}"
        if name == "error":
            message = value.get("error", {}).get("message") if dialect == "messages" \
                else value.get("message")
            if not isinstance(message, str):
                return f"an error event without a message: {data[:200]!r}"
        last = name
    if last not in ends:
        return f"the stream ends without {' or '.join(ends)}: {text[-300:]!r}"
    return None


def sse_fault(exchange: Exchange) -> str | None:
    """Why a guarded 200 stream is not well formed: events of `data: ` + JSON object or
    `[DONE]`, ending with `[DONE]` or an OpenAI-format error event."""
    if not exchange.headers.get("content-type", "").startswith("text/event-stream"):
        return f"a streamed answer with Content-Type {exchange.headers.get('content-type')!r}"
    try:
        text = exchange.body.decode()
    except UnicodeDecodeError:
        return "the stream is not UTF-8"
    if not text.endswith("\n\n"):
        return f"the stream does not end on an event boundary: {text[-200:]!r}"
    events = [e for e in text.split("\n\n") if e.strip()]
    last = ""
    for index, event in enumerate(events):
        if not event.startswith("data: "):
            return f"event {index} is not a data event: {event[:200]!r}"
        payload = event.removeprefix("data: ")
        if last == "[DONE]":
            return f"event after [DONE]: {event[:200]!r}"
        if payload == "[DONE]":
            last = "[DONE]"
            continue
        try:
            chunk = json.loads(payload)
        except ValueError:
            return f"event {index} is not JSON: {payload[:200]!r}"
        if not isinstance(chunk, dict):
            return f"event {index} is not a JSON object: {payload[:200]!r}"
        if "error" in chunk:
            try:
                error_of(payload.encode())
            except AssertionError as exc:
                return f"error event {index}: {exc}"
            last = "error"
        elif last == "error":
            return f"a chunk after the error event: {payload[:200]!r}"
        else:
            last = "chunk"
    if last not in ("[DONE]", "error"):
        return f"the stream ends without [DONE] or an error event: {text[-300:]!r}"
    return None


def strings_in(value: Any) -> Iterator[str]:
    """Every string in a JSON value, and in the JSON that a string may itself hold (a
    chat template renders a call's arguments after parsing them)."""
    if isinstance(value, str):
        yield value
        if value[:1] in ("{", "["):
            with suppress(ValueError, RecursionError):
                yield from strings_in(json.loads(value))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def reask_leaks(case: Case, seen: list[Seen]) -> list[str]:
    """Template markers in what reflexguard added to a re-ask (after the client's turns)."""
    leaks = []
    for request in seen[1:]:
        try:
            body = json.loads(request.body)
        except (ValueError, RecursionError):
            continue
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            continue
        for text in strings_in(messages[case.client_messages:]):
            leaks += [f"{marker!r} in {text[:160]!r}" for marker in MARKERS if marker in text]
    return leaks


def escapes_v1(tail: str) -> bool:
    """Whether a pass-through tail leaves /v1 or smuggles a delimiter once any hop decodes
    it (again): a `..` segment (between `/` or `\\`), or a `?` or `#` that only
    decoding produced."""
    decoded = [tail]
    for _ in range(3):
        decoded.append(unquote(decoded[-1]))
    for earlier, later in itertools.pairwise(decoded):
        if any(c in later and c not in earlier for c in "?#"):
            return True
    return any(".." in text.replace("\\", "/").split("/") for text in decoded)


def check(case: Case, outcome: Outcome) -> None:
    exchange = outcome.exchange
    if currently_in_test_context():
        note(f"observed: {exchange.status} {exchange.headers} {exchange.body[:600]!r} "
             f"in {exchange.seconds * 1000:.0f} ms; upstream saw "
             f"{[(s.method, s.raw_path, s.body[:200]) for s in outcome.seen]}")
    assert exchange.fault is None, f"HTTP framing broken: {exchange.fault}"
    assert not outcome.canary_hits, f"reflexguard connected to the canary: {outcome.canary_hits}"
    assert not outcome.foreign, f"connections other than to the upstream: {outcome.foreign}"
    assert outcome.worst_probe < BLOCKED_BOUND, (
        f"/healthz took {outcome.worst_probe * 1000:.0f} ms while this case ran")
    if exchange.status == 500:
        own = not outcome.sent_500 or (
            case.method != "HEAD" and case.dialect != "messages"
            and error_of(exchange.body).get("code") == "internal")
        assert not own, f"reflexguard answered 500 of its own: {exchange.body[:300]!r}"
    if exchange.status >= 400 and case.method != "HEAD":
        if case.dialect == "messages" and exchange.status in (408, 503):
            # A connection bound answers in OpenAI's format before any route is known (a
            # head timeout, the cap); a body timeout is the route's own: either is right.
            try:
                dialect_error_of(exchange.body, "messages")
            except AssertionError:
                error_of(exchange.body)
        elif case.dialect == "messages":
            dialect_error_of(exchange.body, "messages")
        else:
            error_of(exchange.body)
    if case.expect:
        assert exchange.status in case.expect, f"expected {case.expect}, got {exchange.status}"
    if case.expect_text is not None:
        assert case.expect_text in dialect_error_of(exchange.body, case.dialect)["message"]
    client_query = case.path.partition("?")[2]
    for request in outcome.seen:
        assert request.raw_path.startswith("/v1/") and ".." not in request.path.split("/"), (
            f"a request left /v1 upstream: {request.raw_path!r}")
        assert request.query in ("", client_query), f"a query was smuggled: {request.query!r}"
    assert SECRET.encode() not in exchange.body + repr(exchange.headers).encode(), (
        "the upstream's credentials reached the client")
    if case.guarded and exchange.status == 200:
        if case.stream:
            fault = sse_fault(exchange) if case.dialect == "chat" else native_sse_fault(
                exchange, case.dialect)
            assert fault is None, f"malformed guarded stream: {fault}"
        else:
            assert isinstance(json.loads(exchange.body), dict), "a 200 that is not a JSON object"
    if case.guarded:
        leaks = reask_leaks(case, outcome.seen)
        assert not leaks, f"template markers quoted back in a re-ask: {leaks[:3]}"
