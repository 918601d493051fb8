"""Running the fixed tool prompts through reflexguard in front of the embedded model.

Shared by the real-model tests and `python -m bench.embedded_figures`: a tap records the
raw upstream answers, reflexguard runs in-process, and every exchange is kept.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench.tau2.tap import Exchange, Tap
from bench.tau2.tool_prompts import requests
from reflexguard.http.app import build_app
from reflexguard.http.connections import answer_bound
from reflexguard.ops.config import Settings


@dataclass
class PromptResult:
    prompt_id: str
    sent: dict[str, Any]  # the caller's body, as sent
    sent_snapshot: dict[str, Any]  # a deep copy taken before sending
    status: int
    answer: dict[str, Any]
    attempts: int
    violations: int
    exchanges: list[Exchange]  # what the upstream saw and said for this prompt


@dataclass
class RunResult:
    results: list[PromptResult]
    events: list[dict[str, Any]]
    settings: Settings


async def run_prompts(model_url: str, events_path: Path, limit: int | None = None,
                      **settings: Any) -> RunResult:
    tap = Tap(model_url)
    tap_server = TestServer(tap.app())
    await tap_server.start_server()
    config = Settings(upstream=str(tap_server.make_url("/v1")), tool_call_format="content",
                      events=events_path, **settings)
    app: web.Application = build_app(config)
    # The client waits as long as reflexguard may take to answer, never less (issue 18).
    client: TestClient[Any, Any] = TestClient(
        TestServer(app), timeout=aiohttp.ClientTimeout(total=answer_bound(config)))
    await client.start_server()
    results: list[PromptResult] = []
    try:
        for prompt_id, body in requests()[:limit]:
            before = len(tap.exchanges)
            snapshot = copy.deepcopy(body)
            response = await client.post("/v1/chat/completions", data=orjson.dumps(body),
                                         headers={"Content-Type": "application/json",
                                                  "x-reflexguard-session": prompt_id})
            answer = await response.json()
            results.append(PromptResult(
                prompt_id, body, snapshot, response.status, answer,
                int(response.headers.get("x-reflexguard-attempts", "0")),
                int(response.headers.get("x-reflexguard-violations", "0")),
                tap.exchanges[before:],
            ))
    finally:
        await client.close()
        await tap_server.close()
    events = [orjson.loads(line) for line in events_path.read_bytes().splitlines()]
    return RunResult(results, events, config)
