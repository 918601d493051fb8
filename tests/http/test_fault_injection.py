"""`inject_faults` on every guarded route: off changes nothing, a fault reaches the agent
as a damaged model's call would, repair meets it with real re-asks, and every fault is
counted and marked (the faults are simulated: the fake upstream answers correctly)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reflexguard.core.inject import name_variants
from tests.http.fault_routes import FRESH_IDS, PATHS, ROUTES, Route, agent_calls

OFFERED = {"get_order_details", "cancel_order"}
NEAR = set(name_variants("get_order_details").values()) | set(
    name_variants("cancel_order").values())


def injected_calls(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [c for e in lines if e["event"] == "attempt" for c in e["calls"] if "injected" in c]


async def ask(client: Any, route: Route, **headers: str) -> tuple[int, bytes]:
    response = await client.post(PATHS[route.dialect], json=route.body(), headers=headers)
    return response.status, await response.read()


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
async def test_off_and_rate_zero_give_the_same_bytes(fake, proxy, route):
    upstream, _ = fake
    answers = []
    for spec in (None, "seed=3"):
        upstream.script = [route.answer()]
        client = await proxy(**route.settings(), inject_faults=spec)
        status, raw = await ask(client, route)
        assert status == 200
        answers.append(FRESH_IDS.sub(b"ID", raw))
    assert answers[0] == answers[1]
    assert upstream.calls == 2


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
async def test_an_injected_name_reaches_the_agent_when_nothing_is_repaired(
        fake, proxy, route, tmp_path):
    upstream, _ = fake
    upstream.script = [route.answer()]
    client = await proxy(**route.settings(), repair=False, inject_faults="unknown_tool=1")
    status, raw = await ask(client, route)
    assert status == 200 and upstream.calls == 1
    [(name, arguments)] = agent_calls(route, raw)
    assert name not in OFFERED and name in NEAR
    assert json.loads(arguments) == json.loads(json.dumps({"order_id": "#W1234567",
                                                            "detail": "full"}))
    [marked] = injected_calls(tmp_path / "events.jsonl")
    assert marked["injected"] == "unknown_tool" and marked["channel"] == "unknown_tool"
    assert marked["name"] == name
    metrics = await (await client.get("/metrics")).text()
    assert 'reflexguard_injected_faults_total{channel="unknown_tool"} 1.0' in metrics


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
async def test_malformed_arguments_reach_the_agent_where_the_dialect_can_carry_them(
        fake, proxy, route, tmp_path):
    upstream, _ = fake
    upstream.script = [route.answer()]
    client = await proxy(**route.settings(), repair=False, inject_faults="malformed_args=1")
    status, raw = await ask(client, route)
    assert status == 200
    [(name, arguments)] = agent_calls(route, raw)
    assert name == "get_order_details"
    metrics = await (await client.get("/metrics")).text()
    if route.dialect == "messages":  # tool_use input is an object: a model cannot break it
        assert json.loads(arguments) == {"order_id": "#W1234567", "detail": "full"}
        assert 'reflexguard_injected_faults_skipped_total{channel="malformed_args"} 1.0' \
            in metrics
        assert 'kind="fault_not_injected"' in metrics
        assert not injected_calls(tmp_path / "events.jsonl")
        return
    with pytest.raises(ValueError):
        json.loads(arguments)
    assert 'reflexguard_injected_faults_total{channel="malformed_args"} 1.0' in metrics


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
async def test_repair_asks_the_real_model_and_the_reask_is_not_damaged_by_default(
        fake, proxy, route):
    upstream, _ = fake
    upstream.script = [route.answer(), route.answer()]
    client = await proxy(**route.settings(), inject_faults="schema_violation=1,seed=2")
    status, raw = await ask(client, route)
    assert status == 200 and upstream.calls == 2  # the first answer damaged, one re-ask
    [(name, arguments)] = agent_calls(route, raw)
    assert name == "get_order_details"
    assert json.loads(arguments) == {"order_id": "#W1234567", "detail": "full"}


@pytest.mark.parametrize("route", [r for r in ROUTES if r.native], ids=lambda r: r.name)
async def test_with_reasks_on_the_reasks_are_damaged_too(fake, proxy, route, tmp_path):
    upstream, _ = fake
    upstream.default = route.answer()
    client = await proxy(**route.settings(), max_repairs=2,
                         inject_faults="unknown_tool=1,reasks=on")
    status, raw = await ask(client, route)
    # Every answer damaged: the re-asks run out, or stop early when a damaged re-ask repeats
    # the first answer's wrong call (the ladder's repeated_failure), as a real model's would.
    assert status == 200 and upstream.calls in (2, 3)
    [(name, _)] = agent_calls(route, raw)
    assert name not in OFFERED  # the least bad attempt, still a damaged one
    assert len(injected_calls(tmp_path / "events.jsonl")) == upstream.calls


async def test_off_and_on_arms_see_the_same_faults_on_their_first_answers(fake, proxy, tmp_path):
    upstream, _ = fake
    route = ROUTES[0]
    names = []
    for repair, events in ((False, "off.jsonl"), (True, "on.jsonl")):
        upstream.script = [route.answer(), route.answer()]
        client = await proxy(repair=repair, events=tmp_path / events,
                             inject_faults="unknown_tool=0.5,schema_violation=0.5,seed=8")
        await ask(client, route)
        names.append([(c["injected"], c.get("injected_detail"))
                      for c in injected_calls(tmp_path / events)])
    assert names[0] == names[1] and len(names[0]) == 1


async def test_a_stream_and_a_json_answer_of_one_conversation_draw_the_same_fault(
        fake, proxy):
    upstream, _ = fake
    client = await proxy(repair=False, inject_faults="unknown_tool=1,seed=4")
    got = []
    for route in ROUTES[:2]:
        upstream.script = [route.answer()]
        got.append(agent_calls(route, (await ask(client, route))[1]))
    assert got[0] == got[1]


async def test_the_seed_header_changes_the_faults_and_a_bad_one_is_refused(fake, proxy):
    upstream, _ = fake
    route = ROUTES[0]
    client = await proxy(repair=False, inject_faults="unknown_tool=1")
    seen = set()
    for seed in range(12):
        upstream.script = [route.answer()]
        status, raw = await ask(client, route, **{"x-reflexguard-fault-seed": str(seed)})
        assert status == 200
        seen.add(agent_calls(route, raw)[0][0])
    assert len(seen) > 1 and not seen & OFFERED
    status, raw = await ask(client, route, **{"x-reflexguard-fault-seed": "seven"})
    assert status == 400 and b"x-reflexguard-fault-seed" in raw


async def test_injection_is_said_on_healthz_and_readyz(proxy):
    client = await proxy(inject_faults={"unknown_tool": 0.2, "seed": 7})
    for path in ("/healthz", "/readyz"):
        body = await (await client.get(path)).json()
        assert body["inject_faults"] == "unknown_tool=0.2,seed=7,reasks=off"
        assert "testing only" in body["warning"]
    plain = await proxy()
    assert "inject_faults" not in await (await plain.get("/healthz")).json()


def test_injection_is_a_warning_at_start_up(tmp_path):
    from structlog.testing import capture_logs

    from reflexguard.http.app import build_app
    from reflexguard.ops.config import Settings

    with capture_logs() as logs:
        build_app(Settings(upstream="http://127.0.0.1:9/v1", inject_faults="unknown_tool=0.3"))
        build_app(Settings(upstream="http://127.0.0.1:9/v1"))
    warnings = [e for e in logs if e["event"] == "fault_injection_on"]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    assert warnings[0]["inject_faults"] == "unknown_tool=0.3,seed=0,reasks=off"
