"""`otel` off (the default): nothing of OpenTelemetry is imported, the hooks are no-ops,
and the overhead header is there all the same."""

from __future__ import annotations

import subprocess
import sys

from reflexguard.ops import tracing
from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, tool_call_completion

PROBE = """
import sys
from reflexguard.http.app import build_app
from reflexguard.ops.config import Settings
from reflexguard.ops import tracing
import reflexguard.api
build_app(Settings(upstream="http://127.0.0.1:9/v1"))
reflexguard.api.settings_guard()
assert tracing.hooks is tracing.OFF
ours = ("reflexguard.ops.otel", "opentelemetry.sdk.trace", "opentelemetry.exporter",
        "opentelemetry.propagate")
print(sorted(m for m in sys.modules if m.startswith(ours)))
"""


def test_off_imports_no_opentelemetry_of_ours():
    # Not "no opentelemetry at all": redis 8.1 (reflexguard.ops.state) imports the API
    # and the SDK's metrics itself when they are installed (redis/observability).
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


async def test_off_answers_carry_the_overhead_header(fake, proxy):
    upstream, _ = fake
    upstream.script = [Scripted(tool_call_completion("get_order_details",
                                                     {"order_id": "#W1234567",
                                                      "detail": "full"}))]
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status == 200 and tracing.hooks is tracing.OFF
    overhead = float(response.headers["x-reflexguard-overhead-ms"])
    assert 0 <= overhead < 60_000
    assert "traceparent" not in upstream.headers[0]
