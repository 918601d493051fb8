"""Finding tool calls written as text in an assistant's `content`.

Nothing here does I/O. Three shapes are recognised, as model servers' tool parsers do:
`<tool_call>{...}</tool_call>` blocks (Hermes/Qwen), fenced JSON blocks, and bare
`{"name": ..., "arguments": ...}` objects (alone or in a list). A block that is
evidently a call but whose JSON is broken is still returned, with its raw arguments
text, so that it is classified as `malformed_args` rather than lost.

Model output is untrusted: every scan here is bounded. Patterns are written so the
regex engine cannot backtrack quadratically, text longer than `MAX_SCAN_CHARS` is not
scanned at all, and at most `MAX_DECODE_ATTEMPTS` JSON decodes are tried; either
cap is reported in `Extraction.capped` so the caller can count it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# No `\s*` next to a lazy group: with many blanks that pair backtracks in O(n^2).
# The captured block is stripped in Python instead.
TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
FENCED = re.compile(r"```[a-zA-Z0-9_-]*(.*?)```", re.DOTALL)
NAME_FIELD = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
ARGS_FIELD = re.compile(r'"(?:arguments|parameters)"\s*:\s*(.*)', re.DOTALL)
_DECODER = json.JSONDecoder()
# A reply carrying tool calls is a few KB; 256 KiB leaves room for huge arguments while
# keeping the worst case (capped decodes over capped text) to a few milliseconds.
MAX_SCAN_CHARS = 256 * 1024
MAX_DECODE_ATTEMPTS = 64


@dataclass(frozen=True)
class TextCall:
    name: str
    arguments: str  # raw JSON text, possibly broken


@dataclass(frozen=True)
class Extraction:
    calls: tuple[TextCall, ...]
    remainder: str  # the content with the calls cut out
    capped: str | None = None  # which bound stopped the scan, if one did


def _as_call(obj: Any) -> TextCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    else:
        return None
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return TextCall(name=obj["name"], arguments=text)


def _calls_in_json(value: Any) -> list[TextCall] | None:
    items = value if isinstance(value, list) else [value]
    calls = [_as_call(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _broken_call(text: str) -> TextCall | None:
    """A block that names a tool but whose JSON does not parse."""
    name = NAME_FIELD.search(text)
    if name is None:
        return None
    args = ARGS_FIELD.search(text, name.end()) or ARGS_FIELD.search(text)
    raw = args.group(1).rstrip().removesuffix("}").rstrip() if args else ""
    return TextCall(name=name.group(1), arguments=raw)


def _parse_block(text: str) -> list[TextCall]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        broken = _broken_call(text)
        return [broken] if broken else []
    return _calls_in_json(value) or []


def _bare_objects(content: str) -> tuple[list[TextCall], list[tuple[int, int]], bool]:
    """Top-level `{...}` objects (or `[{...}]` lists) that are calls; True if capped."""
    calls: list[TextCall] = []
    spans: list[tuple[int, int]] = []
    position = 0
    decodes = 0
    while True:
        brace = content.find("{", position)
        if brace < 0:
            return calls, spans, False
        if decodes >= MAX_DECODE_ATTEMPTS:
            return calls, spans, True  # braces remain, but the budget is spent
        # `[{` may open a list of calls; if the list does not parse, the object alone may.
        starts = (brace - 1, brace) if brace > 0 and content[brace - 1] == "[" else (brace,)
        decoded = None
        for start in starts:
            decodes += 1
            try:
                decoded = _DECODER.raw_decode(content, start)
                break
            except (ValueError, RecursionError):
                continue
        if decoded is None:
            position = brace + 1  # past the brace, never back onto it
            continue
        value, end = decoded
        found = _calls_in_json(value)
        if found:
            calls.extend(found)
            spans.append((start, end))
        position = max(end, brace + 1)


def _name_only(text: str) -> str | None:
    """A reply that is exactly `{"name": "..."}`: a call of a tool without arguments."""
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and set(value) == {"name"} and isinstance(value["name"], str):
        return str(value["name"])
    return None


def _cut(content: str, spans: list[tuple[int, int]]) -> str:
    pieces: list[str] = []
    last = 0
    for start, end in sorted(spans):
        pieces.append(content[last:start])
        last = end
    pieces.append(content[last:])
    return "".join(pieces).strip()


def extract_calls(content: str | None) -> Extraction:
    """Tool calls written in `content`. Never raises; bounded in time (see the module)."""
    if not content or ("{" not in content):
        return Extraction((), content or "")
    if len(content) > MAX_SCAN_CHARS:
        return Extraction((), content, capped="text_scan_oversize")
    for pattern in (TAGGED, FENCED):
        calls: list[TextCall] = []
        spans: list[tuple[int, int]] = []
        for match in pattern.finditer(content):
            found = _parse_block(match.group(1).strip())
            if found:
                calls.extend(found)
                spans.append(match.span())
        if calls:
            return Extraction(tuple(calls), _cut(content, spans))
    bare, spans, capped = _bare_objects(content)
    cap = "text_scan_decode_cap" if capped else None
    if bare:
        return Extraction(tuple(bare), _cut(content, spans), cap)
    stripped = content.strip()
    bare_name = _name_only(stripped)
    if bare_name is not None:
        return Extraction((TextCall(name=bare_name, arguments="{}"),), "")
    if stripped.startswith("{") and NAME_FIELD.search(stripped):
        broken = _broken_call(stripped)
        if broken:
            return Extraction((broken,), "", cap)
    return Extraction((), content, cap)
