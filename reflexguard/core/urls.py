"""URL hygiene at the boundary: pass-through paths that stay below /v1, and URLs that
can be shown without their credentials. Nothing here does I/O.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

# After decoding, a path segment may not hide a separator, a query, a fragment or
# another level of encoding: each of those was a way out of /v1 (docs/reliability.md).
_FORBIDDEN = ("\\", "?", "#", "%", "\x00")
_ENCODED_SEPARATORS = ("%2f", "%5c")


class UnsafePath(ValueError):
    """A pass-through path that could reach the upstream outside /v1/."""


def _clean(path: str) -> bool:
    if any(ch in path for ch in _FORBIDDEN) or any(ord(ch) < 0x20 for ch in path):
        return False
    return all(segment not in (".", "..") for segment in path.split("/"))


def passthrough_tail(raw_path: str) -> str:
    """The part after `/v1/` of a raw request path (without its query), checked.

    The raw path is decoded once and twice; every form must be a plain path below
    /v1/. The tail returned is the once-decoded one, which the upstream will see.
    """
    path = raw_path.split("?", 1)[0]
    if not path.startswith("/v1/"):
        raise UnsafePath("path must be below /v1/")
    raw_tail = path[len("/v1/"):]
    if any(sep in raw_tail.lower() for sep in _ENCODED_SEPARATORS):
        raise UnsafePath("path hides an encoded separator")
    if "%" in raw_tail:
        once = unquote(raw_tail)
        if not _clean(once) or not _clean(unquote(once)):
            raise UnsafePath("path decodes to something outside /v1/")
        return once
    if not _clean(raw_tail):
        raise UnsafePath("path leaves /v1/")
    return raw_tail


def redact(url: str | None) -> str | None:
    """`url` with any user:password@ removed, for logs, /healthz and start-up lines."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, "***@" + netloc, parts.path, parts.query, parts.fragment))
