"""Bounds on untrusted input: nesting depth and the length of strings we repeat.

Nothing here does I/O. orjson reads 1,024 levels of nesting but writes only 254, and
Python's recursion limit is about 1,000: anything deeper than `DEFAULT_MAX_JSON_DEPTH`
is refused at the boundary, before code that recurses or re-encodes ever sees it.
"""

from __future__ import annotations

DEFAULT_MAX_JSON_DEPTH = 100  # deep JSON Schemas reach ~20; re-asks add 3 levels
LABEL_LIMIT = 128  # request strings that reach metric labels, logs and events


def nesting_could_exceed(raw: bytes, limit: int) -> bool:
    """A cheap pre-check: fewer opening brackets than `limit` cannot nest that deep."""
    return raw.count(b"{") + raw.count(b"[") > limit


def depth_exceeds(value: object, limit: int) -> bool:
    """Whether parsed JSON nests more than `limit` containers deep. Iterative."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: object = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children  # type: ignore[attr-defined]
                     if isinstance(child, dict | list))
    return False


def clip(text: str, limit: int = LABEL_LIMIT) -> str:
    """`text` cut to `limit` characters, marked when cut."""
    return text if len(text) <= limit else text[:limit] + "…"


def safe_label(text: str, limit: int = LABEL_LIMIT) -> str:
    """A request-supplied string fit for a label or a log line: clipped, and valid UTF-8
    (header bytes that are not UTF-8 arrive as lone surrogates, which JSON cannot hold)."""
    clipped = clip(text, limit)
    if clipped.isascii():
        return clipped
    return clipped.encode("utf-8", "replace").decode("utf-8")
