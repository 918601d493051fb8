"""The OTLP/HTTP span exporter with the direct encoder (ops/otel_encode.py) (issue 34).

This is an I/O edge, imported only with `otel` on (reflexguard.ops.otel_setup). Everything
but the encoding is the SDK exporter's own: the endpoint, headers, timeout, compression,
TLS and retries it reads from the standard variables, its size limit and its self-metrics.
`export` is the SDK's, with `encode_spans(spans).SerializePartialToString()` replaced; a
batch the direct encoder refuses, and every batch when the SDK's exporter lacks the parts
this relies on (another SDK version), go through the SDK's own `export`, a counted and
logged fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http import _common
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from reflexguard.ops.otel_encode import Encoder, Unencodable

# The SDK exporter's parts that its export() uses, and so does ours.
NEEDED = ("_shutdown", "_metrics", "_client", "_max_request_size")

Report = Callable[..., None]  # report(kind, **fields): a counted, logged fallback


class DirectSpanExporter(OTLPSpanExporter):
    def __init__(self, report: Report, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report = report
        self.encoder = Encoder()
        self.direct = all(hasattr(self, name) for name in NEEDED) and hasattr(
            _common, "_is_request_too_large")
        if not self.direct:
            report("otel_sdk_span_encoder", reason="the SDK exporter's internals differ")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self.direct or self._shutdown:
            return super().export(spans)  # the SDK's warning when shut down
        try:
            data = self.encoder.request(spans)
        except Unencodable as exc:
            self.report("otel_sdk_span_encoder", reason=str(exc))
            return super().export(spans)
        if _common._is_request_too_large(data, self._max_request_size):
            # Rare, and the SDK's to say: its export() logs and records the drop.
            return super().export(spans)
        with self._metrics.export_operation(len(spans)) as result:
            sent = self._client.export(data)
            if not sent.success:
                result.error = sent.error
                result.error_attrs = ({"http.response.status_code": sent.status_code}
                                      if sent.status_code is not None else None)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
