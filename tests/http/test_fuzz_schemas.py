"""Hostile tool schemas against the running app (issue 18): every schema of the corpus
(tests/http/fuzz/hostile_schemas.py), on the chat, Messages and Responses routes, gets a
well-formed answer or the route's dialect error, and none blocks the event loop for 100 ms
(the harness's /healthz prober, a slow probe re-checked once as the fuzz suite does).
What the budget refuses is a 400 that names the tool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.http.fuzz.checks import PROBE_BOUND, Case, Outcome, check, error_of, run
from tests.http.fuzz.harness import Scene
from tests.http.fuzz.hostile_schemas import ROUTES, Hostile, corpus, reply_body, request_body
from tests.http.fuzz.setup import Fixture, fuzz_setup

pytestmark = pytest.mark.fuzz

# A case blocked outside the schema's cost (its `blocked_by` says where) is a strict
# xfail: the fix, its owner's, turns it into a failure to notice.
CORPUS = [pytest.param(h, id=h.name, marks=pytest.mark.xfail(strict=True, reason=h.blocked_by))
          if h.blocked_by else pytest.param(h, id=h.name) for h in corpus()]


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    with fuzz_setup(tmp_path_factory.mktemp("fuzz-schemas")) as fixture:
        yield fixture


def anthropic_error(body: bytes) -> dict[str, Any]:
    """The Messages route's error (`{"type": "error", "error": {type, message}}`)."""
    parsed = json.loads(body)
    assert parsed.get("type") == "error" and isinstance(parsed.get("error"), dict), body[:300]
    error: dict[str, Any] = parsed["error"]
    assert isinstance(error.get("type"), str) and isinstance(error.get("message"), str)
    return error


def check_answer(route: str, case: Case, outcome: Outcome) -> dict[str, Any] | None:
    """The suite's checks, with the Messages route's own error format; the error, if any."""
    exchange = outcome.exchange
    if route != "messages":
        check(case, outcome)
        return error_of(exchange.body) if exchange.status >= 400 else None
    assert exchange.fault is None, f"HTTP framing broken: {exchange.fault}"
    assert not outcome.canary_hits and not outcome.foreign
    if case.expect:
        assert exchange.status in case.expect, (exchange.status, exchange.body[:300])
    if exchange.status >= 400:
        error = anthropic_error(exchange.body)
        assert exchange.status != 500 or outcome.sent_500, exchange.body[:300]
        return error
    assert isinstance(json.loads(exchange.body), dict), "a 200 that is not a JSON object"
    return None


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("hostile", CORPUS)
def test_a_hostile_schema_neither_blocks_the_loop_nor_breaks_the_answer(
        fuzz: Fixture, hostile: Hostile, route: str) -> None:
    reply = Scene(body=reply_body(route, hostile))
    case = Case(profile="a", body=request_body(route, hostile), path=ROUTES[route],
                plan=(reply,) * 4, expect=(400,) if hostile.refused else (),
                guarded=not hostile.refused)
    outcome = run(fuzz.harness, case)
    error = check_answer(route, case, outcome)
    assert outcome.worst_probe < PROBE_BOUND, (
        f"/healthz waited {outcome.worst_probe * 1000:.0f} ms (twice) while {hostile.name} "
        f"ran on {route}")
    if hostile.refused:
        assert error is not None and f"'{hostile.call}'" in error["message"], error
    else:  # the fake answers each route natively: an answer, or a re-ask's own verdict
        assert outcome.exchange.status == 200, (outcome.exchange.status,
                                                outcome.exchange.body[:300])
