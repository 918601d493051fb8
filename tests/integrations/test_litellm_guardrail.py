"""The LiteLLM guardrail inside a real LiteLLM proxy process, in front of the fake upstream.

One proxy for the module, started when collection ended (tests/integrations/proxies.py:
its start, 15-45 s, passes beside the tests before); the fake's script is reset per test.
reflexguard's events file is how the test sees reflexguard's own counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from reflexguard.integrations.litellm import REPAIR_TAG
from tests.api.test_openai_guard import GOOD, _request, _script
from tests.fakes.doc_snippets import fenced, wrong_once
from tests.fakes.fake_upstream import FakeUpstream, tool_call_completion
from tests.integrations import proxies
from tests.integrations.proxies import MASTER_KEY

pytestmark = pytest.mark.litellm_proxy


MODEL = "qwen"  # the model group of the config in docs/litellm.md
EXAMPLE_PROXY = "http://127.0.0.1:4000/v1"


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[FakeUpstream, str, Path]]:
    """docs/litellm.md's config (proxies.docs_config) with reflexguard's events file on."""
    started = proxies.gateway("docs")
    yield started.fake, started.url(), started.events


@pytest.fixture
def proxy(gateway: tuple[FakeUpstream, str, Path]) -> tuple[FakeUpstream, openai.OpenAI, Path]:
    fake, url, events = gateway
    fake.script.clear()
    fake.requests.clear()
    fake.default = None
    return fake, openai.OpenAI(base_url=url, api_key=MASTER_KEY, max_retries=0), events


def _outcomes(events: Path) -> list[str]:
    lines = [json.loads(line) for line in events.read_text().splitlines()] \
        if events.exists() else []
    return [e["outcome"] for e in lines if e["event"] == "outcome"]


def test_valid_call_passes_through_litellm_unchanged(
        proxy: tuple[FakeUpstream, openai.OpenAI, Path]) -> None:
    fake, client, _ = proxy
    _script(fake, tool_call_completion("get_order_details", GOOD))
    reply = client.chat.completions.create(model=MODEL, **_request())
    assert reply.choices[0].message.tool_calls[0].function.name == "get_order_details"
    assert fake.calls == 1


def test_invalid_call_is_reasked_through_litellms_router(
        proxy: tuple[FakeUpstream, openai.OpenAI, Path]) -> None:
    fake, client, events = proxy
    _script(fake, tool_call_completion("get_order", GOOD),
            tool_call_completion("get_order_details", GOOD))
    request = _request()
    reply = client.chat.completions.create(model=MODEL, **request)
    call = reply.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_order_details", GOOD)
    assert fake.calls == 2
    reask: dict[str, Any] = fake.requests[1]
    # The deployment's model, not the group's name: the re-ask went through the router.
    assert reask["model"] == fake.requests[0]["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert reask["messages"][-1]["role"] == "tool"
    assert "get_order" in reask["messages"][-1]["content"]
    assert "fixed_by_reask" in _outcomes(events)
    log = events.with_name("litellm-log.jsonl")
    # LiteLLM logs in the background, after the response: wait for both records.
    logged = _litellm_log(log, lambda text: "fixed_by_reask" in text and REPAIR_TAG in text)
    repairs = [r for r in logged if REPAIR_TAG in (r["tags"] or [])]
    assert len(repairs) == 1  # the re-ask is a call of its own in LiteLLM's logging
    records = [g for r in logged for g in (r["guardrails"] or [])
               if g.get("guardrail_name") == "reflexguard"]
    assert any(g["guardrail_response"]["outcome"] == "fixed_by_reask"
               and g["guardrail_status"] == "guardrail_intervened" for g in records)


def _litellm_log(path: Path, ready: Callable[[str], bool]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if ready(text):
            break
        time.sleep(0.05)
    return [json.loads(line) for line in text.splitlines()]


def test_streamed_invalid_call_is_repaired_before_the_client_sees_it(
        proxy: tuple[FakeUpstream, openai.OpenAI, Path]) -> None:
    fake, client, _ = proxy
    _script(fake, tool_call_completion("get_order", GOOD, content="Let me check."),
            tool_call_completion("get_order_details", GOOD))
    chunks = list(client.chat.completions.create(model=MODEL, stream=True, **_request()))
    deltas = [d.function for c in chunks for ch in c.choices
              for d in (ch.delta.tool_calls or []) if d.function]
    name = "".join(f.name or "" for f in deltas)
    args = "".join(f.arguments or "" for f in deltas)
    assert (name, json.loads(args)) == ("get_order_details", GOOD)
    text = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    assert text == "Let me check."  # the text went out as it came; the call was held
    assert fake.calls == 2
    assert not fake.requests[1].get("stream")  # the re-ask is not streamed


def test_request_without_tools_is_not_touched(
        proxy: tuple[FakeUpstream, openai.OpenAI, Path]) -> None:
    fake, client, _ = proxy
    request = _request()
    request.pop("tools")
    reply = client.chat.completions.create(model=MODEL, **request)
    assert reply.choices[0].message.content == "no script left"
    assert fake.calls == 1


def test_litellm_doc_example_runs_against_the_docs_config(
        gateway: tuple[FakeUpstream, str, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake, url, _ = gateway
    fake.script.clear()
    fake.requests.clear()
    fake.default = wrong_once
    monkeypatch.setenv("LITELLM_MASTER_KEY", MASTER_KEY)
    [snippet] = fenced("litellm.md", "python")
    assert EXAMPLE_PROXY in snippet
    exec(compile(snippet.replace(EXAMPLE_PROXY, url), "docs/litellm.md", "exec"), {})
    assert json.loads(capsys.readouterr().out) == {"order_id": "#W123",
                                                   "reason": "ordered by mistake"}
    assert fake.calls == 2
