"""Logit margins of tool-call decisions, read from a completion's logprobs. No I/O.

The input is OpenAI's Chat Completions logprobs format (vLLM, llama.cpp servers and
llama-cpp-python all return it): `choices[i].logprobs.content` is one entry per generated
token, `{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}`.
The tokens, joined, are the *raw* generated text: for native `tool_calls` that is the text
the server's tool parser read (`<tool_call>{"name": ...}</tool_call>`), so both output
formats are located the same way, in the token text, never in the parsed message.

- per-token margin: logprob(chosen) - the best listed alternative whose token differs;
  negative when the chosen token was not the top-1; None when no alternative is listed.
- name margin: the smallest per-token margin over the tokens overlapping the tool's name
  where the call spells it; None when the name cannot be found in the tokens.
- call margin: the per-token margin at the first token of the call's opening text
  (`<tool_call>`, a fence, or the `{`/`[` that starts the call JSON).

Logprobs are untrusted input: every malformed piece is skipped, nothing here raises.
"""

from __future__ import annotations

import codecs
import math
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from reflexguard.core.extract import extract_calls

# Bound the work on untrusted text: beyond this many tokens a reply is not analysed.
MAX_TOKENS = 32_768
_OPENERS = ("<tool_call>", "```")


@dataclass(frozen=True)
class CallMargin:
    index: int  # the call's position in the reply; -1 for a reply without a call
    name: str | None
    name_margin: float | None
    call_margin: float | None


class Token(NamedTuple):  # a tuple: one is built per generated token
    start: int  # character span of the token inside the joined token text
    end: int
    entry: dict[str, Any]

    @property
    def margin(self) -> float | None:
        # On demand: only a call's name and opening tokens are ever asked.
        return token_margin(self.entry)


def _finite(value: object) -> float | None:
    if type(value) is float:  # the common case first: this runs for every listed token
        return value if math.isfinite(value) else None
    return float(value) if type(value) is int else None


def token_margin(entry: dict[str, Any]) -> float | None:
    """logprob(chosen) - max(logprob of listed alternatives whose token differs)."""
    chosen = _finite(entry.get("logprob"))
    alternatives = entry.get("top_logprobs")
    if chosen is None or not isinstance(alternatives, list):
        return None
    token = entry.get("token")
    best: float | None = None
    for alternative in alternatives:
        if not isinstance(alternative, dict) or alternative.get("token") == token:
            continue
        logprob = _finite(alternative.get("logprob"))
        if logprob is not None and (best is None or logprob > best):
            best = logprob
    return None if best is None else chosen - best


def _byte_list(value: object) -> bytes | None:
    if type(value) is not list:
        return None
    try:
        return bytes(value)  # refuses anything but ints in 0..255
    except (TypeError, ValueError):
        return None


def _all_bytes(entries: list[dict[str, Any]]) -> list[bytes] | None:
    raw: list[bytes] = []
    for entry in entries:
        chunk = _byte_list(entry.get("bytes"))
        if chunk is None:
            return None
        raw.append(chunk)
    return raw


def _texts_from_bytes(raw: list[bytes]) -> list[tuple[int, int]]:
    """Spans from the `bytes` fields, so a token that splits a multi-byte character is
    placed on that character (OpenAI sends such tokens as `bytes:\\xe2\\x80`)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    spans: list[tuple[int, int]] = []
    pending: list[int] = []  # tokens whose bytes wait for the rest of their character
    length = 0
    for chunk in raw:
        produced = decoder.decode(chunk)
        start = length
        if pending and produced:
            for index in pending:  # the split character belongs to every piece of it
                spans[index] = (start, start + 1)
            pending = []
        length += len(produced)
        spans.append((start, length))
        if not produced:
            pending.append(len(spans) - 1)
    return spans


def token_spans(entries: list[dict[str, Any]]) -> tuple[str, list[Token]]:
    """The joined token text and each token's span and margin."""
    raw = _all_bytes(entries)
    if raw is not None:
        text = b"".join(raw).decode("utf-8", errors="replace")
        return text, [Token(s, e, entry)
                      for (s, e), entry in zip(_texts_from_bytes(raw), entries, strict=True)]
    tokens: list[Token] = []
    pieces: list[str] = []
    length = 0
    for entry in entries:
        piece = entry.get("token")
        piece = piece if isinstance(piece, str) else ""
        pieces.append(piece)
        tokens.append(Token(length, length + len(piece), entry))
        length += len(piece)
    return "".join(pieces), tokens


def _entries(choice: dict[str, Any]) -> list[dict[str, Any]]:
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or len(content) > MAX_TOKENS:
        return []
    return [entry for entry in content if isinstance(entry, dict)]


def _call_names(message: dict[str, Any]) -> list[str]:
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        names: list[str] = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            names.append(name if isinstance(name, str) else "")
        return names
    content = message.get("content")
    written = extract_calls(content if isinstance(content, str) else None)
    return [call.name for call in written.calls]


def _name_span(text: str, name: str, cursor: int) -> tuple[int, int] | None:
    if not name:
        return None
    quoted = re.escape(name)
    for pattern in (rf'"name"\s*:\s*"({quoted})"', rf'"({quoted})"'):
        found = re.compile(pattern).search(text, cursor)
        if found:
            return found.span(1)
    return None


def _call_start(text: str, cursor: int, name_at: int) -> int:
    """Where the call's opening text begins: the last opener between cursor and name."""
    before = text[cursor:name_at]
    tagged = max(before.rfind(opener) for opener in _OPENERS)
    if tagged >= 0:
        return cursor + tagged
    brace = before.rfind("{")
    if brace < 0:
        return cursor
    bracket = before[:brace].rstrip()
    return cursor + (len(bracket) - 1 if bracket.endswith("[") else brace)


def _overlapping(tokens: list[Token], start: int, end: int) -> list[Token]:
    return [t for t in tokens if t.start < end and t.end > start]


def _first_at(tokens: list[Token], position: int) -> Token | None:
    for token in tokens:
        if token.end > position:
            return token
    return None


def _minimum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def completion_margins(completion: dict[str, Any], choice: int = 0) -> list[CallMargin]:
    """The margins of each call in one choice; [] without logprobs. A reply without a call
    gives one CallMargin(index=-1) whose call margin is the first token's margin."""
    choices = completion.get("choices")
    if not isinstance(choices, list) or not 0 <= choice < len(choices):
        return []
    picked = choices[choice]
    if not isinstance(picked, dict):
        return []
    entries = _entries(picked)
    if not entries:
        return []
    text, tokens = token_spans(entries)
    message = picked.get("message")
    names = _call_names(message if isinstance(message, dict) else {})
    if not names:
        return [CallMargin(index=-1, name=None, name_margin=None, call_margin=tokens[0].margin)]
    margins: list[CallMargin] = []
    cursor = 0
    for index, name in enumerate(names):
        span = _name_span(text, name, cursor)
        if span is None:
            margins.append(CallMargin(index, name or None, None, None))
            continue
        opening = _first_at(tokens, _call_start(text, cursor, span[0]))
        name_margin = _minimum([t.margin for t in _overlapping(tokens, *span)])
        margins.append(CallMargin(index, name, name_margin,
                                  opening.margin if opening else None))
        cursor = span[1]
    return margins
