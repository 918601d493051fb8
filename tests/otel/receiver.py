"""A real OTLP/HTTP receiver on loopback: what the official exporter sends, decoded with
the official opentelemetry-proto messages (ExportTraceServiceRequest and
ExportMetricsServiceRequest), kept as plain records for the tests to read.

It runs its own event loop in a thread: the SDK's exporter posts from a thread of its
own and waits for the answer, so a receiver on the test's loop could deadlock a flush.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

KINDS = {ProtoSpan.SPAN_KIND_SERVER: "SERVER", ProtoSpan.SPAN_KIND_CLIENT: "CLIENT",
         ProtoSpan.SPAN_KIND_INTERNAL: "INTERNAL", ProtoSpan.SPAN_KIND_PRODUCER: "PRODUCER",
         ProtoSpan.SPAN_KIND_CONSUMER: "CONSUMER"}


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs}


@dataclass
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: int
    resource: dict[str, Any]
    event_times: list[int] = field(default_factory=list)  # unix ns, one per event


@dataclass
class Receiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _body(self, request: web.Request) -> bytes:
        assert request.content_type == "application/x-protobuf", request.content_type
        raw = await request.read()
        return gzip.decompress(raw) if request.headers.get("Content-Encoding") == "gzip" else raw

    async def traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await self._body(request))
        with self._lock:
            self.requests += 1
            for resource_spans in message.resource_spans:
                resource = attributes_of(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(ReceivedSpan(
                            span.name, KINDS[span.kind], span.trace_id.hex(),
                            span.span_id.hex(), span.parent_span_id.hex(),
                            span.start_time_unix_nano, span.end_time_unix_nano,
                            attributes_of(span.attributes),
                            [(e.name, attributes_of(e.attributes)) for e in span.events],
                            span.status.code, resource,
                            [e.time_unix_nano for e in span.events]))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def metrics_route(self, request: web.Request) -> web.Response:
        message = ExportMetricsServiceRequest()
        message.ParseFromString(await self._body(request))
        with self._lock:
            self.requests += 1
            for resource_metrics in message.resource_metrics:
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        self.metrics.append(MessageToDict(metric))
        return web.Response(body=ExportMetricsServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_post("/v1/traces", self.traces)
            app.router.add_post("/v1/metrics", self.metrics_route)
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self._runner = runner
            server = site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="otlp-receiver", daemon=True)
        self._thread.start()
        assert ready.wait(10), "the OTLP receiver did not start"

    def stop(self) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()
            self.metrics.clear()

    def named(self, prefix: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name.startswith(prefix)]

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return sorted((s for s in self.spans if s.trace_id == trace_id),
                          key=lambda s: s.start_ns)
