"""The Python API's spans (through the application's own providers, under its current
span) and a worker pool's (each worker exports from its own providers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_workers import served
from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion
from tests.fakes.threaded_upstream import threaded_fake
from tests.otel.receiver import Receiver

GOOD = {"order_id": "#W1234567", "detail": "full"}
ROOT = Path(__file__).resolve().parents[2]

# An application that set up OpenTelemetry itself, then guards its OpenAI client.
APPLICATION = """
import json, sys
import openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
import reflexguard
from tests.conftest import chat_body

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
client = reflexguard.guard(openai.OpenAI(base_url=sys.argv[1], api_key="unused",
                                         max_retries=0), otel="on")
with trace.get_tracer("app").start_as_current_span("agent turn") as turn:
    body = chat_body(stream=sys.argv[2] == "stream")
    reply = client.chat.completions.create(**body)
    if sys.argv[2] == "stream":
        reply = list(reply)
    print(format(turn.get_span_context().trace_id, "032x"))
provider.shutdown()
"""


# The same, with the anthropic SDK's Messages client (a native Messages upstream).
ANTHROPIC_APPLICATION = """
import sys
import anthropic
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
import reflexguard
from tests.http.dialect_fixtures import messages_body

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
client = reflexguard.guard(anthropic.Anthropic(base_url=sys.argv[1].removesuffix("/v1"),
                                               api_key="unused", max_retries=0), otel="on")
with trace.get_tracer("app").start_as_current_span("agent turn") as turn:
    client.messages.create(**messages_body())
    print(format(turn.get_span_context().trace_id, "032x"))
provider.shutdown()
"""


def fake_with(*script: Scripted) -> FakeUpstream:
    return FakeUpstream(script=list(script))


@pytest.mark.parametrize("mode", ["whole", "stream"])
def test_python_api_spans_join_the_applications_trace(otlp: Receiver, mode):
    fake = fake_with(Scripted(tool_call_completion("get_order_detail", GOOD)),
                     Scripted(tool_call_completion("get_order_details", GOOD)))
    with threaded_fake(fake) as (_, url):
        out = subprocess.run([sys.executable, "-c", APPLICATION, url, mode],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    trace_id = out.stdout.strip().splitlines()[-1]
    spans = otlp.trace(trace_id)
    turn = next(s for s in spans if s.name == "agent turn")
    guard = next(s for s in spans if s.name == "apply_guardrail reflexguard")
    inference = [s for s in spans if s.kind == "CLIENT"]
    assert guard.parent_id == turn.span_id and guard.kind == "INTERNAL"
    assert [s.attributes["reflexguard.attempt.kind"] for s in inference] == ["initial",
                                                                             "re-ask"]
    assert inference[0].parent_id == turn.span_id
    assert inference[1].parent_id == guard.span_id
    assert inference[0].attributes["gen_ai.request.stream"] is (mode == "stream")
    assert inference[1].attributes["gen_ai.response.model"] == "fake-upstream"
    assert guard.attributes["gen_ai.guardrail.result.value"] == "fixed_by_reask"
    assert guard.events[0][1]["gen_ai.tool.name"] == "get_order_detail"


def test_python_api_messages_spans_name_the_anthropic_format(otlp: Receiver):
    from tests.fakes.native_replies import anthropic_call

    fake = fake_with(Scripted(anthropic_call("get_order_detail", GOOD)),
                     Scripted(anthropic_call("get_order_details", GOOD)))
    with threaded_fake(fake) as (_, url):
        out = subprocess.run([sys.executable, "-c", ANTHROPIC_APPLICATION, url],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    spans = otlp.trace(out.stdout.strip().splitlines()[-1])
    # The anthropic SDK emits GenAI spans of its own beside ours: ours carry the attempt.
    inference = [s for s in spans if "reflexguard.attempt.kind" in s.attributes]
    guard = next(s for s in spans if s.name == "apply_guardrail reflexguard")
    assert [s.attributes["gen_ai.provider.name"] for s in inference] == ["anthropic"] * 2
    assert inference[1].parent_id == guard.span_id
    assert inference[0].attributes["gen_ai.response.finish_reasons"] == ["tool_use"]
    assert guard.attributes["gen_ai.guardrail.result.value"] == "fixed_by_reask"


def test_each_worker_exports_its_own_spans(otlp: Receiver, monkeypatch):
    monkeypatch.setenv("REFLEXGUARD_OTEL", "on")
    fake = FakeUpstream(default=Scripted(tool_call_completion("get_order_details", GOOD)))
    with threaded_fake(fake) as (_, url), served(url, "--workers", "2") as server:
        server.started()
        sent = server.until_every_worker_answered(2)
        assert server.stop() == 0  # SIGTERM: each worker flushes as it stops
    servers = otlp.named("POST /v1/chat/completions")
    assert len(servers) == sent
    pids = {s.resource["process.pid"] for s in servers}
    assert len(pids) == 2
    by_trace: dict[str, list[Any]] = {}
    for span in otlp.spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    for spans in by_trace.values():
        assert sorted(s.kind for s in spans) == ["CLIENT", "INTERNAL", "SERVER"]
        assert len({s.resource["process.pid"] for s in spans}) == 1
    assert json.dumps(fake.headers).count("traceparent") == sent
