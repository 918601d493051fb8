"""OTLP trace export requests written as protobuf bytes directly (issue 34).

Pure: no I/O. The OTLP exporter's encoder builds one protobuf message object per span,
attribute and value (`encode_spans`), then serializes them: 30-50 us a span on the bench
machine, paid in the batch processor's thread of the serving process. This writes the same
ExportTraceServiceRequest (opentelemetry/proto/trace/v1/trace.proto) field by field, and
keeps the bytes of recurring pieces (attribute pairs, the resource, the scope): a span of
the proxy's is a join of a dozen cached pieces and its ids and times. tests/otel/
test_encode.py holds its output equal, message for message, to the SDK encoder's.

What it does not write it refuses (Unencodable), and the exporter falls back to the SDK's
encoder for that batch: links (the proxy makes none), mapping values, bytes values.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

KINDS = {SpanKind.INTERNAL: 1, SpanKind.SERVER: 2, SpanKind.CLIENT: 3, SpanKind.PRODUCER: 4,
         SpanKind.CONSUMER: 5}
KIND_FIELDS = {kind: b"\x30" + bytes((value,)) for kind, value in KINDS.items()}
STATUS_FIELDS = {0: b"\x7a\x00", 1: b"\x7a\x02\x18\x01", 2: b"\x7a\x02\x18\x02"}  # no message
# Span.flags: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, with IS_REMOTE for a remote parent.
LOCAL_PARENT = b"\x85\x01" + struct.pack("<I", 0x100)
REMOTE_PARENT = b"\x85\x01" + struct.pack("<I", 0x300)
VARIETY = 256  # distinct values of one key before its pairs are no longer cached
PAIRS_KEPT = 4096  # cached attribute pairs; a full cache is emptied (unique ids pass through)
SMALL = [bytes((n,)) for n in range(0x80)]  # one-byte varints
_fixed64 = struct.Struct("<Q").pack
_double = struct.Struct("<d").pack


class Unencodable(ValueError):
    """A span this encoder does not write (the SDK's encoder does)."""


def varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return bytes((value,))
    if value < 0:
        value += 1 << 64  # int64: ten bytes of two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    size = len(payload)
    return tag + (SMALL[size] if size < 0x80 else varint(size)) + payload


def any_value(value: Any) -> bytes:
    """An AnyValue message. The oneof is always written, a zero or empty value included."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return field(b"\x0a", value.encode())
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        array = b"".join(field(b"\x0a", any_value(v)) for v in value)
        return field(b"\x2a", array)
    raise Unencodable(f"attribute value of type {type(value).__name__}")


class Encoder:
    """One encoder per exporter (one thread exports at a time: the batch processor's)."""

    def __init__(self) -> None:
        self.pairs: dict[tuple[bytes, str, type, Any], bytes] = {}
        self.names: dict[str, bytes] = {}  # span names' fields
        self.misses: dict[str, int] = {}  # cache misses per attribute key
        self.varied: set[str] = set()  # keys written without the cache
        # (resource, scope) ids -> the objects (to tell a reused id) and their bytes
        self.headers: dict[tuple[int, int], tuple[Any, Any, tuple[bytes, bytes, bytes, bytes]]] = {}

    def attributes(self, tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
        """Repeated KeyValue fields under `tag`; a pair with a hashable value is cached
        with its tag, so a recurring one costs a lookup. A key whose values keep changing
        (a request id, a measured time) stops being cached after VARIETY misses, so it
        cannot churn the cache."""
        if not attributes:
            return b""
        pairs, varied = self.pairs, self.varied
        out = []
        for key, value in attributes.items():
            kind = type(value)
            if kind is list or kind is tuple or key in varied:
                out.append(field(tag, field(b"\x0a", key.encode())
                                 + field(b"\x12", any_value(value))))
                continue
            cache_key = (tag, key, kind, value)
            found = pairs.get(cache_key)
            if found is None:
                misses = self.misses[key] = self.misses.get(key, 0) + 1
                if misses > VARIETY:
                    varied.add(key)
                if len(pairs) >= PAIRS_KEPT:
                    pairs.clear()
                found = pairs[cache_key] = field(tag, field(b"\x0a", key.encode())
                                                 + field(b"\x12", any_value(value)))
            out.append(found)
        return b"".join(out)

    def span(self, span: ReadableSpan) -> bytes:
        if span.links:
            raise Unencodable("span links")
        context = span.context
        if context is None or span.start_time is None or span.end_time is None:
            raise Unencodable("a span without context or times")
        parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"),
                 b"\x12\x08", context.span_id.to_bytes(8, "big")]
        if context.trace_state:
            state = ",".join(f"{k}={v}" for k, v in context.trace_state.items())
            parts.append(field(b"\x1a", state.encode()))
        parent = span.parent
        if parent is not None:
            parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
        name = self.names.get(span.name)
        if name is None:
            if len(self.names) >= PAIRS_KEPT:
                self.names.clear()
            name = self.names[span.name] = field(b"\x2a", span.name.encode())
        parts += (name, KIND_FIELDS[span.kind],
                  b"\x39", _fixed64(span.start_time), b"\x41", _fixed64(span.end_time),
                  self.attributes(b"\x4a", span.attributes))
        if span.dropped_attributes:
            parts.append(b"\x50" + varint(span.dropped_attributes))
        for event in span.events or ():
            body = b"\x09" + _fixed64(event.timestamp) + field(b"\x12", event.name.encode()) \
                + self.attributes(b"\x1a", event.attributes)
            if event.dropped_attributes:
                body += b"\x20" + varint(event.dropped_attributes)
            parts.append(field(b"\x5a", body))
        if span.dropped_events:
            parts.append(b"\x60" + varint(span.dropped_events))
        if span.dropped_links:
            parts.append(b"\x70" + varint(span.dropped_links))
        status = span.status
        if status.description:
            code = status.status_code.value
            parts.append(field(b"\x7a", field(b"\x12", status.description.encode())
                               + (b"\x18" + varint(code) if code else b"")))
        else:
            parts.append(STATUS_FIELDS[status.status_code.value])
        parts.append(REMOTE_PARENT if parent is not None and parent.is_remote
                     else LOCAL_PARENT)
        return b"".join(parts)

    def parts(self, span: ReadableSpan) -> tuple[bytes, bytes, bytes, bytes]:
        """ResourceSpans' resource and schema, ScopeSpans' scope and schema, as the SDK
        writes them; cached per resource and scope object (a provider has one resource,
        a tracer one scope)."""
        resource, scope = span.resource, span.instrumentation_scope
        found = self.headers.get((id(resource), id(scope)))
        if found is not None and found[0] is resource and found[1] is scope:
            return found[2]
        scope_body = b""
        if scope is not None:
            scope_body = ((field(b"\x0a", scope.name.encode()) if scope.name else b"")
                          + (field(b"\x12", scope.version.encode()) if scope.version else b"")
                          + self.attributes(b"\x1a", scope.attributes))
        made = (field(b"\x0a", self.attributes(b"\x0a", resource.attributes)), scope_body,
                field(b"\x1a", scope.schema_url.encode())
                if scope is not None and scope.schema_url else b"",
                field(b"\x1a", resource.schema_url.encode()) if resource.schema_url else b"")
        if len(self.headers) >= PAIRS_KEPT:
            self.headers.clear()
        self.headers[(id(resource), id(scope))] = (resource, scope, made)
        return made

    def request(self, spans: Sequence[ReadableSpan]) -> bytes:
        """ExportTraceServiceRequest: spans grouped by resource, then by scope."""
        groups: dict[tuple[int, int], list[bytes]] = {}
        heads: dict[tuple[int, int], ReadableSpan] = {}
        for span in spans:
            key = (id(span.resource), id(span.instrumentation_scope))
            if key not in groups:
                groups[key], heads[key] = [], span
            groups[key].append(field(b"\x12", self.span(span)))
        by_resource: dict[int, list[bytes]] = {}
        resources: dict[int, tuple[bytes, bytes]] = {}
        for key, encoded in groups.items():
            resource, scope, scope_schema, resource_schema = self.parts(heads[key])
            scope_spans = field(b"\x0a", scope) + b"".join(encoded) + scope_schema
            by_resource.setdefault(key[0], []).append(field(b"\x12", scope_spans))
            resources[key[0]] = (resource, resource_schema)
        return b"".join(
            field(b"\x0a", resources[r][0] + b"".join(scopes) + resources[r][1])
            for r, scopes in by_resource.items())
