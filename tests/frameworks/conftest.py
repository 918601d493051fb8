"""The real agent frameworks against a scripted, SIMULATED upstream on loopback.

Every framework test runs one agent turn that needs one tool call. The upstream's first
tool-offering answer calls a tool that does not exist (`get_wether`); reflexguard must
re-ask (the re-ask carries the bad call in its history, so the script then calls
`get_weather`), the framework runs the real tool, and the upstream ends with text. Without
the guard the framework sees `get_wether` and fails (the Agents SDK raises, the others
answer "unknown tool" and never reach the final text).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

import reflexguard
from tests.fakes.fake_upstream import FakeUpstream, Scripted, text_completion, tool_call_completion
from tests.fakes.native_replies import function_call, message_item, openai_response
from tests.frameworks import resolution

FINAL = "SIMULATED-FINAL: sunny in Paris"
WEATHER = "SIMULATED-WEATHER: sunny"
BAD, GOOD = "get_wether", "get_weather"
ARGS = {"city": "Paris"}


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    responses = "input" in body
    seen = json.dumps(body)
    if not body.get("tools"):
        return openai_response(message_item("ok")) if responses else text_completion("ok")
    if WEATHER in seen:  # the framework ran the real tool: finish
        return openai_response(message_item(FINAL)) if responses else text_completion(FINAL)
    name = GOOD if BAD in seen else BAD  # a re-ask carries the bad call in its history
    return (openai_response(function_call(name, ARGS)) if responses
            else tool_call_completion(name, ARGS))


def script(body: dict[str, Any]) -> Scripted:
    # A fresh id per answer: LangGraph's message reducer replaces a message whose id it
    # has seen, as a real server's ids never repeat.
    served.append(1)
    kind = "resp" if "input" in body else "chatcmpl"
    return Scripted({**_answer(body), "id": f"{kind}_sim{len(served)}"})


served: list[int] = []


def get_weather(city: str) -> str:
    """Get the weather for a city."""
    ran.append(city)
    return WEATHER


ran: list[str] = []


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[FakeUpstream, str]]:
    ran.clear()
    fake = FakeUpstream(default=script)
    server = TestServer(fake.app())
    await server.start_server()
    yield fake, str(server.make_url("/v1"))
    await server.close()


@pytest.fixture
async def via_proxy(scripted: tuple[FakeUpstream, str], tmp_path: Any,
                    proxy: Any) -> tuple[FakeUpstream, str]:
    """reflexguard in front of the scripted upstream, on a real loopback port."""
    fake, url = scripted
    client = await proxy(upstream=url, events=tmp_path / "events.jsonl")
    return fake, str(client.make_url("/v1"))


def guarded_async(url: str) -> Any:
    import openai

    return reflexguard.guard(openai.AsyncOpenAI(base_url=url, api_key="sk-test",
                                                max_retries=0))


def assert_repaired(fake: FakeUpstream, output: str, streamed: bool) -> None:
    """The agent ran the real tool with the repaired call and got the final text; the
    upstream saw the bad call re-asked (3 tool-offering requests: bad, re-ask, final),
    the agent's own requests streamed when the run streamed (re-asks never are)."""
    assert ran == ["Paris"], ran
    assert FINAL in output, output
    tooled = [r for r in fake.requests if r.get("tools")]
    assert len(tooled) == 3, [json.dumps(r)[:300] for r in tooled]
    assert [bool(r.get("stream")) for r in tooled] == [streamed, False, streamed]
    # The re-ask carries the bad call; the agent never saw it: its own history, sent with
    # the tool's result, holds only the repaired call (a framework's own unknown-tool
    # recovery would send the bad call back).
    assert BAD in json.dumps(tooled[1]) and WEATHER in json.dumps(tooled[2])
    assert BAD not in json.dumps(tooled[2])


def pytest_collection_finish(session: pytest.Session) -> None:
    """pip's resolution for test_metadata.py starts now, when that test is to run: its
    minute of waits on the package index then passes beside the tests before it."""
    if session.config.option.collectonly:
        return
    if any(item.nodeid.endswith("test_metadata.py::test_reflexguard_resolves_beside_current_"
                                "frameworks") for item in session.items):
        resolution.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    resolution.stop()
