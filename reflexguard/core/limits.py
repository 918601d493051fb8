"""Bounds on untrusted input: nesting depth and the length of strings we repeat.

Nothing here does I/O. orjson reads 1,024 levels of nesting but writes only 254, and
Python's recursion limit is about 1,000: anything deeper than `DEFAULT_MAX_JSON_DEPTH`
is refused at the boundary, before code that recurses or re-encodes ever sees it.
"""

from __future__ import annotations

DEFAULT_MAX_JSON_DEPTH = 100  # deep JSON Schemas reach ~20; re-asks add 3 levels
LABEL_LIMIT = 128  # request strings that reach metric labels, logs and events

# Tool schemas (docs/reliability.md, "Schema budgets"; issue 18). Expanded nodes: the
# schema tree with every `$ref` followed on every path (core/schema_cost.py). Checking
# validity costs ~10 ns a node. The largest schemas measured: pydantic's for the mcp
# package's own request types, ~700 nodes (tau2's retail tools: 8); the default is ~30x.
DEFAULT_MAX_SCHEMA_NODES = 20_000
# fancy-regex's backtracking steps per match (its default: 1,000,000, ~50 ms): a pattern
# that needs more is a counted validator_error, never the model's fault.
PATTERN_BACKTRACK_LIMIT = 10_000
# Building a schema error costs ~10-25 us per expanded node of a failing anyOf/oneOf (its
# error carries every branch's errors): the first error's message is built only while
# (the widest anyOf/oneOf's nodes) x (values in the arguments) stays under this (~100 ms
# at worst); past it, a short message. Optional fields' anyOf of 2-3 nodes stay detailed.
ERROR_DETAIL_BUDGET = 4_000
ERROR_MESSAGE_LIMIT = 300  # characters of one schema error repeated to the model


def nesting_could_exceed(raw: bytes, limit: int) -> bool:
    """A cheap pre-check: fewer opening brackets than `limit` cannot nest that deep."""
    return raw.count(b"{") + raw.count(b"[") > limit


def depth_exceeds(value: object, limit: int) -> bool:
    """Whether parsed JSON nests more than `limit` containers deep. Iterative, one level
    at a time: an answer's logprobs are ~400 small containers, and a tuple per node on a
    stack cost three times this (docs/performance.md)."""
    level: list[object] = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        deeper: list[object] = []
        push = deeper.append
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:  # type: ignore[attr-defined]
                kind = type(child)
                # Parsed JSON holds exact dicts and lists; isinstance only for the rest.
                if kind is dict or kind is list or (
                        kind not in _SCALARS and isinstance(child, dict | list)):
                    push(child)
        level = deeper
    return False


_SCALARS = frozenset({str, int, float, bool, type(None)})


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


# The most an upstream answer may hold (settings.max_answer_bytes): twice the request
# body limit, far past a real completion (32k tokens of text are ~128 KB; with top-20
# logprobs on every token, ~40 MB), so only a looping or broken upstream reaches it.
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024
