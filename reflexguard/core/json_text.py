"""Reading and writing wire JSON as the agents' own decoders do. Nothing here does I/O.

orjson is the fast path everywhere; it refuses two things an agent's decoder (Python's
`json`, every SDK built on it, JavaScript's `JSON.parse`) reads: a lone UTF-16 surrogate
escape (`"\\ud800"`, half an emoji a small model split) and integers past 64 bits. A guard
that refused them would drop or fail what the agent could have read: worse than no guard
(issue 30). Both functions take the stdlib's road only where orjson refused.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(payload: bytes | str) -> Any:
    """The JSON value of `payload`; ValueError when neither reader reads it."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        try:
            return json.loads(payload)
        except RecursionError:
            raise ValueError("JSON nested past the interpreter's recursion limit") from None


def dumps(value: Any) -> bytes:
    """`value` as JSON bytes; a lone surrogate written as its escape, as it arrived (the
    stdlib's ensure_ascii), an integer past 64 bits in full. TypeError for what is no JSON
    at all, or nests past both writers."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        try:
            return json.dumps(value).encode()
        except (ValueError, RecursionError) as exc:
            raise TypeError(f"not encodable as JSON: {exc}") from None
