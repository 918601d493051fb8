"""URL hygiene at the boundary: pass-through paths that stay below /v1, URLs that can be
shown without their credentials, and upstream URLs that name an endpoint instead of a
base. Nothing here does I/O.
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


# The endpoints reflexguard appends to an upstream's base URL (and their usual
# neighbours): a base URL ending in one of them doubles the path, and every request 404s.
ENDPOINT_PATHS = ("chat/completions", "completions", "messages", "responses", "embeddings",
                  "models")


def endpoint_suffix(url: str) -> str | None:
    """The endpoint path `url` ends in (`/v1/chat/completions` -> `/chat/completions`),
    or None for a base URL. Longest first: `chat/completions` before `completions`."""
    path = urlsplit(url).path.rstrip("/").lower()
    for endpoint in ENDPOINT_PATHS:
        if path == f"/{endpoint}" or path.endswith(f"/{endpoint}"):
            return f"/{endpoint}"
    return None


def without_endpoint(url: str) -> str:
    """`url` with the endpoint path found by `endpoint_suffix` taken off: the base URL to
    suggest instead (`http://h:8000/v1/chat/completions` -> `http://h:8000/v1`)."""
    suffix = endpoint_suffix(url)
    if suffix is None:
        return url
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path[:len(path) - len(suffix)], "", ""))


def upstream_base(url: str) -> str:
    """The base URL reflexguard's upstream client sends to (http/upstream.py, held to it by
    tests/cli/test_upstream_url.py): credentials out (they travel as a header), and `/v1`
    after a URL with no path. The `listening` line and /healthz both show this."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url if url.rstrip("/").count("/") > 2 else url + "/v1"
