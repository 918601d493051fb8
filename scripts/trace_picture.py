"""Record one repaired request's trace through the real exporter and draw it as a
waterfall: `python scripts/trace_picture.py docs/img/trace-repaired.png`.

reflexguard runs in this process with `otel` on, in front of the scripted fake upstream
(simulated model latency: 120 ms per answer, labelled so), and exports over OTLP/HTTP to
the tests' loopback receiver, which decodes what arrives with opentelemetry-proto. The
first answer calls a tool that was not offered; the re-ask's answer is valid. The spans
are also written beside the picture as JSON, so the picture can be checked against them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.otel.receiver import ReceivedSpan, Receiver

TRACE = "5b8efff798038103d269b633813fc60c"
TRACEPARENT = f"00-{TRACE}-eee19b7ec3c1b174-01"
LATENCY = 0.12  # seconds per simulated upstream answer
COLOURS = {"SERVER": "#4c72b0", "CLIENT": "#dd8452", "INTERNAL": "#55a868"}


async def record(receiver: Receiver) -> list[ReceivedSpan]:
    from aiohttp.test_utils import TestClient, TestServer

    from reflexguard.http.app import build_app
    from reflexguard.ops import otel_setup
    from reflexguard.ops.config import Settings
    from tests.conftest import chat_body
    from tests.fakes.fake_upstream import FakeUpstream, Scripted, tool_call_completion

    good = {"order_id": "#W1234567", "detail": "full"}
    fake = FakeUpstream(script=[
        Scripted(tool_call_completion("get_order_detail", good), delay=LATENCY),
        Scripted(tool_call_completion("get_order_details", good), delay=LATENCY)])
    upstream = TestServer(fake.app())
    await upstream.start_server()
    app = build_app(Settings(upstream=str(upstream.make_url("/v1")), otel=True))
    client = TestClient(TestServer(app))
    await client.start_server()
    response = await client.post("/v1/chat/completions", json=chat_body(), headers={
        "traceparent": TRACEPARENT, "x-reflexguard-session": "conversation-1"})
    assert response.status == 200, await response.text()
    await response.read()
    await client.close()  # the app's cleanup flushes the exporter
    await upstream.close()
    otel_setup.shutdown()
    return receiver.trace(TRACE)


def label(span: ReceivedSpan) -> str:
    a = span.attributes
    if span.kind == "CLIENT":
        return f"{span.name}  [{a.get('reflexguard.attempt.kind')}]"
    if span.name.startswith("apply_guardrail"):
        return f"{span.name}  [{a.get('gen_ai.guardrail.result.value')}]"
    return f"{span.name}  [{a.get('http.response.status_code')}]"


def depth(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> int:
    level = 0
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        level += 1
    return level


def draw(spans: list[ReceivedSpan], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    origin = min(s.start_ns for s in spans)
    by_id = {s.span_id: s for s in spans}
    fig, ax = plt.subplots(figsize=(10, 0.9 * len(spans) + 1.6))
    for index, span in enumerate(spans):
        row = 1.6 * index  # room under each bar for its events' labels
        start = (span.start_ns - origin) / 1e6
        width = max((span.end_ns - span.start_ns) / 1e6, 0.3)
        ax.barh(row, width, left=start, color=COLOURS.get(span.kind, "grey"), height=0.5)
        indent = "    " * depth(span, by_id)
        ax.text(start, row - 0.38, f"{indent}{label(span)}  {width:.1f} ms", fontsize=8,
                va="bottom")
        for (name, attributes), event_ns in zip(span.events, span.event_times, strict=True):
            ax.plot((event_ns - origin) / 1e6, row, "kv", markersize=6)
            ax.text((event_ns - origin) / 1e6 + 2, row + 0.35,
                    f"{name}: {attributes.get('gen_ai.guardrail.result.value')} "
                    f"{attributes.get('gen_ai.tool.name')}", fontsize=7, va="top")
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the request arrived")
    ax.set_title("One repaired request, as exported by reflexguard (otel on)\n"
                 f"simulated upstream: {LATENCY * 1000:.0f} ms per answer", fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), loc="upper center", bbox_to_anchor=(0.5, -0.14),
              ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img/trace-repaired.png")
    receiver = Receiver()
    receiver.start()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    os.environ.setdefault("OTEL_SERVICE_NAME", "reflexguard")
    spans = asyncio.run(record(receiver))
    receiver.stop()
    assert len(spans) == 4, [s.name for s in spans]
    draw(spans, out)
    out.with_suffix(".json").write_text(json.dumps([asdict(s) for s in spans], indent=1))
    print(f"wrote {out} and {out.with_suffix('.json')} ({len(spans)} spans)")


if __name__ == "__main__":
    main()
