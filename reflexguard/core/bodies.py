"""Request bodies as sent: `Content-Encoding` decoded here, bounded. Nothing here does I/O.

aiohttp's own decoding is switched off: it answered encodings it lacks a library for
(`br`, `zstd`) with a plain-text 400 before any handler ran, and a body that did not
inflate reset the connection. Decoding here gives every case an OpenAI-format error and
caps the inflated size, so a small compressed body cannot expand without bound.
"""

from __future__ import annotations

import zlib

from reflexguard.core.errors import BadRequest

# wbits: 16 + MAX_WBITS reads a gzip header, -MAX_WBITS raw deflate, MAX_WBITS zlib.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class UndecodableBody(BadRequest):
    """The body's Content-Encoding does not decode: where it ends is unknown too."""


def decoded_body(raw: bytes, encoding: str | None, limit: int) -> bytes:
    """The body with its Content-Encoding removed, at most `limit` bytes once inflated."""
    name = (encoding or "identity").strip().lower()
    if name in ("", "identity"):
        return raw
    wbits = _WBITS.get(name)
    if wbits is None:
        raise BadRequest(f"Content-Encoding {name[:40]!r} is not supported (use gzip or "
                         "deflate)", status=415, code="unsupported_content_encoding")
    if name == "deflate" and raw[:1] != b"\x78":
        wbits = -zlib.MAX_WBITS  # raw deflate, as some clients send it
    inflater = zlib.decompressobj(wbits)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise UndecodableBody(f"request body cannot be decoded as {name}: {exc}",
                              code="invalid_body_encoding") from None
    if len(body) > limit or inflater.unconsumed_tail:
        raise BadRequest(f"request body exceeds {limit} bytes once decoded", status=413,
                         code="request_too_large")
    if not inflater.eof:
        raise UndecodableBody(f"request body is a truncated {name} stream",
                              code="invalid_body_encoding")
    return body
