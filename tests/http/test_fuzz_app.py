"""Fuzzing the running app (issue 7): hypothesis against reflexguard on loopback sockets,
behind a scripted fake upstream whose answers hypothesis draws.

Whatever a client sends and whatever the model server answers, reflexguard must:
- never answer 500 of its own (an upstream's own 500 may pass on as a status, never as
  reflexguard's `internal` error), and never break HTTP framing (a reset, a cut body, a
  second response inside the first);
- answer every 4xx/5xx with an OpenAI-format error body;
- end a guarded stream with `[DONE]` or an OpenAI-format error event (then `[DONE]`); a
  Messages or Responses stream (streamed upstream events with missing, null, odd-typed,
  duplicated and oversized fields) in its own grammar, ending with its end or error event;
- answer a slow client within its bounds, and cut it (a JSON 408) past them;
- keep its event loop free: /healthz, probed continuously from another thread, answers
  within 1 s while any case is in flight (a case whose probe took over 100 ms is sent
  again, and the better of the two counts: shared machines stall);
- connect to nothing but its upstream (a canary listener that fuzzed `$schema`, `$ref` and
  `$id` URLs point at, proxy variables aimed at it, and an audit hook on Python sockets);
- forward nothing outside /v1, quote no chat-template marker back in a re-ask, and keep
  the upstream's credentials out of every answer and log line.
"""

from __future__ import annotations

import gzip
import json
import string
import zlib
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import TOOLS, chat_body
from tests.http.dialect_fixtures import messages_body, responses_body
from tests.http.fuzz.checks import JSON_HEADERS, SECRET, Case, check, escapes_v1, run
from tests.http.fuzz.harness import Scene
from tests.http.fuzz.setup import ADMIN_TOKEN, SLOW_BOUND, Fixture, fuzz_setup
from tests.http.fuzz.strategies import (
    COMPLETION_SCENES,
    DEPTHS,
    ENVELOPES,
    JSON_LEAVES,
    JSON_VALUES,
    MESSAGES_PLANS,
    PLANS,
    RAW_BODIES,
    REMOTE_SCHEMAS,
    RESPONSES_PLANS,
    VALID_PARAMETERS,
    WELL_KNOWN_METASCHEMAS,
    completion_scene,
    dumps,
    nested,
    tool,
)

pytestmark = pytest.mark.fuzz

PROFILES = ("a", "b")
FUZZ = settings(
    deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.large_base_example],
)


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    with fuzz_setup(tmp_path_factory.mktemp("fuzz")) as fixture:
        yield fixture


# -- model output ---------------------------------------------------------------------------


REQUEST_OPTIONS = st.sampled_from([
    {}, {}, {"tool_choice": "required"}, {"tool_choice": "auto"},
    {"tool_choice": {"type": "function", "function": {"name": "cancel_order"}}},
    {"parallel_tool_calls": False}, {"stream_options": {"include_usage": True}}, {"n": 2},
])


@settings(FUZZ, max_examples=2500)
@given(plan=PLANS, stream=st.booleans(), profile=st.sampled_from(PROFILES),
       options=REQUEST_OPTIONS)
def test_any_model_output_gets_a_well_formed_answer(fuzz: Fixture, plan: list[Scene],
                                                    stream: bool, profile: str,
                                                    options: dict[str, Any]) -> None:
    body = chat_body(stream=stream, **options)
    # n > 1 streams are passed through byte for byte, by design: not checked as guarded.
    case = Case(profile, orjson.dumps(body), plan=tuple(plan), guarded="n" not in options,
                stream=stream, client_messages=len(body["messages"]))
    check(case, run(fuzz.harness, case))


# -- native streams: Messages and Responses (issue 18) ------------------------------------


@settings(FUZZ, max_examples=400)
@given(plan=MESSAGES_PLANS, profile=st.sampled_from(PROFILES))
def test_any_messages_stream_gets_a_well_formed_messages_answer(
        fuzz: Fixture, plan: tuple[Scene, ...], profile: str) -> None:
    """Streamed upstream events with missing, null, odd-typed, duplicated and oversized
    fields: never a 500 of reflexguard's own, and a 200 is a whole Messages stream ending
    in message_stop or an `error` event, never a chat-format line."""
    body = messages_body(stream=True)
    case = Case(profile, orjson.dumps(body), path="/v1/messages", plan=plan, guarded=True,
                stream=True, dialect="messages", client_messages=len(body["messages"]))
    check(case, run(fuzz.harness, case))


@settings(FUZZ, max_examples=400)
@given(plan=RESPONSES_PLANS, profile=st.sampled_from(PROFILES))
def test_any_responses_stream_gets_a_well_formed_responses_answer(
        fuzz: Fixture, plan: tuple[Scene, ...], profile: str) -> None:
    body = responses_body(stream=True)
    case = Case(profile, orjson.dumps(body), path="/v1/responses", plan=plan, guarded=True,
                stream=True, dialect="responses", client_messages=1)
    check(case, run(fuzz.harness, case))


# -- historical call ids of any JSON type, on every route (issue 30) ---------------------------

ANY_ID = st.one_of(JSON_LEAVES, JSON_VALUES)
ROUTES = st.sampled_from(["/v1/chat/completions", "/v1/messages", "/v1/responses"])


def history_case(path: str, call_id: Any, result_id: Any, stream: bool, tools: bool,
                 profile: str) -> Case:
    """A second turn whose call and result carry `call_id` and `result_id` as sent
    ("same": the call's own id)."""
    if isinstance(result_id, str) and result_id == "same":
        result_id = call_id
    call = {"name": "get_order_details", "arguments": '{"order_id": "#W1"}'}
    if path == "/v1/messages":
        body = messages_body(stream=stream, messages=[
            {"role": "user", "content": "Show #W1."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call_id,
                                               "name": call["name"], "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": result_id,
                                          "content": "shipped"}]}])
    elif path == "/v1/responses":
        body = responses_body(stream=stream, input=[
            {"type": "message", "role": "user", "content": "Show #W1."},
            {"type": "function_call", "call_id": call_id, **call},
            {"type": "function_call_output", "call_id": result_id, "output": "shipped"},
            {"type": "message", "role": "user", "content": "And now?"}])
    else:
        body = chat_body(stream=stream, messages=[
            {"role": "user", "content": "Show #W1."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": call}]},
            {"role": "tool", "tool_call_id": result_id, "content": "shipped"},
            {"role": "user", "content": "And now?"}])
    if not tools:
        body.pop("tools")
    dialect = path.removeprefix("/v1/").replace("chat/completions", "chat")
    return Case(profile, dumps(body), path=path, dialect=dialect, guarded=False)


@settings(FUZZ, max_examples=300)
@given(case=st.builds(history_case, ROUTES, ANY_ID, ANY_ID | st.just("same"),
                      st.booleans(), st.booleans(), st.sampled_from(PROFILES)))
def test_any_history_id_gets_a_well_formed_answer(fuzz: Fixture, case: Case) -> None:
    """Ids that are arrays, objects, numbers or null were a 500 on every route."""
    check(case, run(fuzz.harness, case))


# -- slow clients (issue 18) ----------------------------------------------------------------

SLOW_PATHS = st.sampled_from(["/v1/chat/completions", "/v1/messages", "/v1/responses"])


@settings(FUZZ, max_examples=12)
@given(path=SLOW_PATHS, stream=st.booleans(), pieces=st.sampled_from([2, 4, 8]),
       gap=st.sampled_from([0.05, 0.4, 1.0]))
def test_a_slow_client_is_answered_or_cut_at_its_bound(fuzz: Fixture, path: str, stream: bool,
                                                       pieces: int, gap: float) -> None:
    """A request written in pieces: answered when it arrives within profile a's header and
    body timeouts, else a JSON 408; the loop stays free either way."""
    body = {"/v1/chat/completions": chat_body, "/v1/messages": messages_body,
            "/v1/responses": responses_body}[path](stream=stream)
    dialect = path.removeprefix("/v1/").replace("chat/completions", "chat")
    late = pieces * gap > SLOW_BOUND
    # The fake's default is a chat completion: a native route's re-ask reads it as it can.
    case = Case("a", orjson.dumps(body), path=path, pieces=pieces, gap=gap,
                expect=(200, 408) if late else (), dialect=dialect,
                client_messages=len(body.get("messages", [])))
    outcome = run(fuzz.harness, case)
    check(case, outcome)
    if not late:
        assert outcome.exchange.status != 408, "a request within its bounds was cut"


def test_slow_connections_in_bulk_leave_the_proxy_answering(fuzz: Fixture) -> None:
    """300 connections trickling a header byte a second while ordinary requests run: each
    request is answered, /healthz within its bound, and the slow ones are cut (counted)."""
    harness = fuzz.harness
    held = harness.hold_slow_connections("a", 300, b"POST /v1/chat/completions HTTP/1.1\r\n"
                                                   b"X-Slow: ")
    try:
        for profile in PROFILES:
            for _ in range(3):
                case = Case(profile, orjson.dumps(chat_body()), expect=(200,), guarded=True,
                            client_messages=2)
                check(case, run(harness, case))
        held.result(SLOW_BOUND * 5)  # every slow connection cut by the header timeout
    finally:
        held.cancel()
    admin = ((b"Authorization", f"Bearer {ADMIN_TOKEN}".encode()),)
    metrics = run(harness, Case("a", method="GET", path="/metrics", headers=admin))
    assert b'reflexguard_connections_refused_total{reason="header_timeout"}' in \
        metrics.exchange.body


# -- request bodies -------------------------------------------------------------------------

INVALID_CALL = completion_scene(
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_bad", "type": "function",
     "function": {"name": "get_order_details", "arguments": '{"order_id": 5}'}}]},
    "tool_calls", 8, 0.0, None)
UPSTREAM_TURNS = st.lists(st.one_of(st.just(INVALID_CALL), COMPLETION_SCENES), max_size=2)
# (label, fields over chat_body(), statuses allowed, text the error must contain)
TWISTS: list[tuple[str, dict[str, Any], tuple[int, ...], str | None]] = [
    *[(f"$schema {uri}", {"tools": [tool("get_order_details",
                                         {**VALID_PARAMETERS, "$schema": uri})]}, (200,), None)
      for uri in WELL_KNOWN_METASCHEMAS],
    *[(f"remote schema {n}", {"tools": [TOOLS[0], tool("remote_tool", schema)]}, (400,),
       "remote_tool") for n, schema in enumerate(REMOTE_SCHEMAS)],
    ("local $ref", {"tools": [tool("get_order_details", {
        "$defs": {"id": {"type": "string"}}, "type": "object",
        "properties": {"order_id": {"$ref": "#/$defs/id"}, "detail": {"type": "string"}}})]},
     (200,), None),
    ("stream 'true'", {"stream": "true"}, (400,), None),
    ("stream 1", {"stream": 1}, (400,), None),
    ("duplicate tool names", {"tools": [TOOLS[0], TOOLS[1], TOOLS[0]]}, (400,),
     "get_order_details"),
    ("1 MB model", {"model": "HUGE-MODEL-"}, (200,), None),
    ("1 MB user", {"user": "HUGE-USER-"}, (200,), None),
]
TWIST_LABELS = [twist[0] for twist in TWISTS]  # drawn by label: a repr of TWISTS is huge


def twist_case(label: str, stream: bool, profile: str) -> Case:
    _, fields, expect, text = TWISTS[TWIST_LABELS.index(label)]
    body = chat_body(stream=stream)
    body.update(fields)
    for name in ("model", "user"):
        if str(body.get(name, "")).startswith("HUGE-"):
            body[name] += name[0] * 1_000_000
    guarded = expect == (200,)
    return Case(profile, orjson.dumps(body), expect=expect, expect_text=text, guarded=guarded,
                stream=stream and guarded, client_messages=len(body["messages"]))


def deep_case(depth: int, kind: str, where: str, stream: bool, profile: str,
              plan: list[Scene]) -> Case:
    """A request nested `depth` deep (in a message, a tool schema, or an extra field)."""
    body = chat_body(stream=stream)
    if where == "message":  # the system turn: the user's keeps the id calls ground in
        body["messages"][0]["content"] = "__DEEP__"
    elif where == "schema":
        body["tools"] = [*TOOLS, tool("deep_tool", {"type": "object",
                                                     "properties": {"x": "__DEEP__"}})]
    else:
        body["metadata"] = "__DEEP__"
    raw = orjson.dumps(body).replace(b'"__DEEP__"', nested(depth, kind).encode())
    # With only the invalid call scripted, the re-ask gets the fake's valid default.
    return Case(profile, raw, plan=(INVALID_CALL, *plan), expect=() if plan else (200, 400))


REQUEST_CASES = st.one_of(
    st.builds(lambda envelope, profile, plan: Case(profile, json.dumps(envelope).encode(),
                                                   plan=tuple(plan)),
              ENVELOPES, st.sampled_from(PROFILES), UPSTREAM_TURNS),
    *[st.builds(twist_case, st.sampled_from(TWIST_LABELS), st.booleans(),
                st.sampled_from(PROFILES))] * 2,  # twice: the cases with a known answer
    st.builds(deep_case, DEPTHS, st.sampled_from(["list", "dict"]),
              st.sampled_from(["message", "schema", "extra"]), st.booleans(),
              st.sampled_from(PROFILES), UPSTREAM_TURNS),
    st.builds(lambda raw, profile: Case(profile, raw), RAW_BODIES, st.sampled_from(PROFILES)),
)


@settings(FUZZ, max_examples=2000)
@given(case=REQUEST_CASES)
def test_any_request_body_gets_a_well_formed_answer(fuzz: Fixture, case: Case) -> None:
    check(case, run(fuzz.harness, case))


# -- paths, headers, encodings --------------------------------------------------------------

HEADER_BYTES = st.lists(st.integers(0x21, 0xFF).filter(lambda b: b != 0x7F), min_size=1,
                        max_size=40).map(bytes)
HEADER_VALUES = st.one_of(HEADER_BYTES, st.builds(lambda a, b: a + b" \t " + b, HEADER_BYTES,
                                                  HEADER_BYTES),
                          st.sampled_from([b"Bearer sk-test", b"\xff\xfe", b"\xc3\x28",
                                           b"s" * 4000, b"application/json; charset=latin-1"]))
HEADER_NAMES = st.sampled_from([b"x-reflexguard-session", b"authorization",
                                b"openai-organization", b"openai-project", b"content-type",
                                b"accept", b"accept-encoding", b"x-request-id", b"user-agent"])
SEGMENTS = st.one_of(
    st.sampled_from(["models", "chat", "completions", "embeddings", "..", ".", "%2e%2e",
                     "%2E%2E", ".%2e", "%2e.", "..%2f", "%2f", "%2F", "%252e%252e", "%252f",
                     "%3F", "%3fx=1", "%23", "%5c", "%00", "..;", "~", "%zz", "%", "admin",
                     "etc", "passwd", "", "%ff%fe"]),
    st.text(alphabet=string.ascii_letters + string.digits + "-._~%", max_size=6),
)
TAILS = st.lists(SEGMENTS, max_size=5).map("/".join)
PATHS = st.one_of(
    st.sampled_from(["/v1/../../etc/passwd", "/v1/%2e%2e/%2e%2e/etc/passwd",
                     "/v1/..%2f..%2fadmin", "/v1/%252e%252e/admin", "/v1/models%3Fx=1",
                     "/v1/models", "/v1/chat/completions", "/healthz", "/metrics",
                     "/reflexguard/sessions/x", "/reflexguard/sessions/%ff%fe", "/", "/v1",
                     "/v2/models", "//v1/models", "/V1/models", "/v1//models",
                     "/v1/models?limit=2"]),
    TAILS.map(lambda tail: "/v1/" + tail),
    TAILS.map(lambda tail: "/reflexguard/sessions/" + tail),
)
ENCODINGS = st.sampled_from([None, ("gzip", True), ("gzip", False), ("deflate", True),
                             ("deflate", False), ("br", False), ("zstd", False),
                             ("identity", True),
                             ("gzip, deflate", False), ("x-unknown", False)])
GARBAGE = b"\x1f\x8b\x08\x00garbage-not-a-stream" + bytes(range(40))


def encoded(body: bytes, encoding: tuple[str, bool] | None) -> tuple[bytes, list[tuple[bytes,
                                                                                        bytes]]]:
    if encoding is None:
        return body, []
    name, valid = encoding
    header = [(b"Content-Encoding", name.encode())]
    if not valid:
        return GARBAGE, header
    if name == "gzip":
        return gzip.compress(body), header
    if name == "deflate":
        return zlib.compress(body), header
    return body, header


def edge_case(method: str, path: str, headers: dict[bytes, bytes],
              encoding: tuple[str, bool] | None, kind: str, noise: bytes, profile: str) -> Case:
    plain = {"stream": False}
    body = {"guarded": orjson.dumps(chat_body(**plain)),
            "unguarded": orjson.dumps({k: v for k, v in chat_body(**plain).items()
                                       if k != "tools"}),
            "empty": b"", "noise": noise}[kind]
    sent, extra = encoded(body, encoding)
    expect: tuple[int, ...] = ()
    tail = path.partition("?")[0].removeprefix("/v1/")
    chat = method == "POST" and path == "/v1/chat/completions"
    undecodable = encoding in (("gzip", False), ("deflate", False))
    if (path.startswith("/v1/") and escapes_v1(tail)) or (chat and undecodable):
        expect = (400,)
    elif chat and kind == "guarded" and (encoding is None or encoding[1]) and all(
            value.isascii() for name, value in headers.items()
            if name in (b"authorization", b"openai-organization", b"openai-project")):
        expect = (200,)
    # One of each name: aiohttp's parser itself refuses a repeated Content-Type or
    # User-Agent with a plain-text 400 before any handler runs (docs/reliability.md).
    named = {b"content-type": b"application/json", **dict(headers)}
    return Case(profile, sent, method, path, (*named.items(), *extra), expect=expect,
                guarded=kind == "guarded" and chat, client_messages=2)


EDGE_CASES = st.builds(
    edge_case,
    st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
    PATHS, st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=3), ENCODINGS,
    st.sampled_from(["guarded", "unguarded", "empty", "noise"]), st.binary(max_size=80),
    st.sampled_from(PROFILES),
)


@settings(FUZZ, max_examples=1500)
@given(case=EDGE_CASES)
def test_any_path_header_or_encoding_gets_a_well_formed_answer(fuzz: Fixture,
                                                               case: Case) -> None:
    check(case, run(fuzz.harness, case))


# -- what the fuzzing leaves behind ---------------------------------------------------------


def test_after_fuzzing_metrics_logs_and_health_stay_bounded_and_clean(fuzz: Fixture) -> None:
    harness = fuzz.harness
    huge = chat_body(model="HUGE-MODEL-" + "m" * 1_000_000, user="HUGE-USER-" + "u" * 1_000_000)
    for profile in PROFILES:
        case = Case(profile, orjson.dumps(huge), expect=(200,), guarded=True,
                    headers=(*JSON_HEADERS, (b"x-reflexguard-session",
                                             b"HUGE-SESSION-" + b"s" * 4000)),
                    client_messages=2)
        check(case, run(fuzz.harness, case))
    admin = ((b"Authorization", f"Bearer {ADMIN_TOKEN}".encode()),)
    for profile in PROFILES:
        for path in ("/metrics", "/reflexguard/sessions/" + "HUGE-SESSION-" + "s" * 4000):
            case = Case(profile, method="GET", path=path, headers=admin)
            outcome = run(fuzz.harness, case)
            check(case, outcome)
            if path == "/metrics":
                assert outcome.exchange.status == 200
                longest = max(map(len, outcome.exchange.body.splitlines()))
                assert longest <= 2000, f"a /metrics line of {longest} characters"
        health = run(fuzz.harness, Case(profile, method="GET", path="/healthz", headers=()))
        assert health.exchange.status == 200
        assert SECRET.encode() not in health.exchange.body
        assert b"fuzzuser" not in health.exchange.body
    for name in ("log.jsonl", "events-a.jsonl", "events-b.jsonl"):
        path = fuzz.directory / name
        text = path.read_bytes() if path.exists() else b""
        assert SECRET.encode() not in text, f"the upstream's credentials are in {name}"
        for line in text.splitlines():
            if b"HUGE-" in line:
                assert len(line) <= 8192, f"a {len(line)}-byte line in {name}: {line[:200]!r}"
    assert harness.audit is not None and harness.prober is not None
    assert not harness.canary.hits, f"the canary was reached: {harness.canary.hits[:3]}"
    assert not harness.audit.foreign, f"foreign connections: {harness.audit.foreign[:5]}"
    probes = sorted(p.seconds for p in harness.prober.probes)
    failed = sum(not p.ok for p in harness.prober.probes)
    print(f"\n{harness.cases} cases; /healthz probes: {len(probes)}, failed {failed}, "
          f"p50 {probes[len(probes) // 2] * 1000:.1f} ms, "
          f"p99 {probes[int(len(probes) * 0.99)] * 1000:.1f} ms; longest wait while a case "
          f"was in flight {harness.worst_in_flight * 1000:.1f} ms")
    assert failed == 0
