"""The loop scan: which calls of a reply repeat what the conversation already did. Nothing
here does I/O.

A small model that stops making progress repeats one valid call (`cat example.txt` 14
times on BFCL multi_turn_base, docs/bench.md) until a step limit ends the turn. Every call
is valid, so a guard that judges each call alone sees nothing. reflexguard sees the whole
conversation on every request, so it can tell: the dialect readers
(reflexguard/dialects/trajectory.py) turn the conversation since the user last spoke into
`Step`s, one per historical call with its result, and `scan` decides from them which
(tool, arguments) a new call must not simply repeat. The rules, and why each (decided in
docs/decisions.md, "The loop guard"):

- **Same call**: the same tool name and the same arguments as canonical JSON (parsed, keys
  sorted, written again; the raw text when it does not parse), so `{"a":1,"b":2}` and
  `{"b": 2, "a": 1}` are one call.
- **Same result**: the result's text after whitespace normalisation (every run of
  whitespace one space, the ends stripped); an `is_error` result is its text marked as an
  error. Exact otherwise: a result that differs in one character is a different result.
- **Since the user last spoke**: a new user turn is a new request; what was useless before
  it may be what the user now asks for.
- **Novelty resets**: a step whose (call, result) pair is new since the user spoke means
  the world answered something not seen before (a write, a job that moved on), so only the
  steps from the latest such step on count. A file re-read after writing it therefore never
  counts the reads before the write; an alternation of two calls that bring nothing new
  (`ls`, `cat`, `ls`, `cat`) still counts as a loop.
- **Every earlier result equal**: a call whose results differ within that window is never
  a repeat; and a call whose result ever changed with nothing new from another call in
  between (a poll answering 10%, 50%, done) is polled, never a repeat in this turn, at any
  `loop_repeats`. (A poll whose result has not changed yet looks like a loop: it gets the
  one re-ask, and its call goes through if the model makes it again.)
- A call with no result (the conversation moved on without one) neither counts nor resets.

`scan` is one pass over the steps plus one over the window; `repeats_in` one dict lookup
per call of the reply.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import orjson

from reflexguard.core.model import Reply

DEFAULT_REPEATS = 2  # a call already made twice with one result is not made a third time
ERROR_MARK = "error: "  # what an is_error result's text is prefixed with, to compare


@dataclass(frozen=True, slots=True)
class Step:
    """One historical call since the user last spoke, and what it returned."""

    name: str
    arguments: str  # canonical (`canonical`)
    result: str | None  # normalised (`normal_text`); None: no result was recorded


@dataclass(frozen=True, slots=True)
class Repeat:
    """A call the conversation has made `times` times in a row of nothing new, each time
    with `result`."""

    name: str
    arguments: str
    times: int
    result: str


@dataclass(frozen=True)
class LoopIndex:
    """The calls a reply must not simply repeat, by (name, canonical arguments)."""

    repeats: dict[tuple[str, str], Repeat]

    @cached_property
    def names(self) -> frozenset[str]:
        """The tool names among them: a reply calling none of them needs no closer look."""
        return frozenset(name for name, _ in self.repeats)

    def __bool__(self) -> bool:
        return bool(self.repeats)


NO_LOOPS = LoopIndex({})

# What the loop guard did about a reply that repeats (core/loop_guard.py): counted it
# (observe), re-asked and gave the agent the re-ask's answer, re-asked and kept the
# model's own answer (the re-ask repeated again, failed, or was not allowed), or, with
# `loop_guard: stop`, gave the agent a text answer that ends the loop instead.
LoopAction = Literal["observed", "replaced", "kept", "stopped"]


@dataclass(frozen=True)
class LoopReport:
    """The loop guard's reading of the reply the ladder settled on, and its action."""

    repeats: tuple[tuple[int, Repeat], ...]  # (position in the reply's calls, what it repeats)
    action: LoopAction
    reason: str | None = None  # why the model's answer was kept
    attempt: int | None = None  # the number of the loop re-ask, when one was made

    @property
    def changed(self) -> bool:
        """Whether the agent gets something other than the model's repeated reply."""
        return self.action in ("replaced", "stopped")


def canonical(arguments: object) -> str:
    """A call's arguments as canonical JSON: a string is parsed first (the raw text when it
    does not parse), an object (a Messages `input`) is written as it is; keys sorted."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONEncodeError, TypeError):
        # What orjson refuses (integers past 64 bits, nesting past 255) has the stdlib's
        # spelling: still one string per value, which is all a comparison needs.
        try:
            return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
        except (ValueError, RecursionError):
            return repr(value)


def normal_text(text: str) -> str:
    """A result's text as compared: whitespace runs as one space, the ends stripped."""
    return " ".join(text.split())


def scan(steps: Sequence[Step], repeats: int) -> LoopIndex:
    """The calls made at least `repeats` times, each with the same result, since the latest
    step that brought something new, and never a call whose result changed on its own (the
    module's rules)."""
    if repeats < 1 or len(steps) < repeats:
        return NO_LOOPS
    seen: set[tuple[str, str, str]] = set()
    last: dict[tuple[str, str], tuple[int, str]] = {}  # call -> (position, result) last seen
    polling: set[tuple[str, str]] = set()
    start = 0  # the latest novel step: the window's first
    for at, step in enumerate(steps):
        if step.result is None:
            continue
        call = (step.name, step.arguments)
        before = last.get(call)
        if before is not None and before[1] != step.result and start <= before[0]:
            # Its result changed with nothing new from any other call in between: the
            # tool answers differently by itself (a job, a clock), so it is polled.
            polling.add(call)
        last[call] = (at, step.result)
        key = (step.name, step.arguments, step.result)
        if key not in seen:
            seen.add(key)
            start = at
    runs: dict[tuple[str, str], tuple[int, str | None]] = {}  # result None: they differed
    for step in steps[start:]:
        if step.result is None:
            continue
        call = (step.name, step.arguments)
        known = runs.get(call)
        if known is None:
            runs[call] = (1, step.result)
        else:
            times, result = known
            runs[call] = (times + 1, result if result == step.result else None)
    return LoopIndex({call: Repeat(call[0], call[1], times, result)
                      for call, (times, result) in runs.items()
                      if times >= repeats and result is not None and call not in polling})


def repeats_in(reply: Reply, index: LoopIndex) -> tuple[tuple[int, Repeat], ...]:
    """(position in the reply's calls, what it repeats) for each call of `reply` that
    repeats a call of `index`. Calls within one reply are never counted against each other:
    none of them has a result yet."""
    if not index or not reply.tool_calls:
        return ()
    names = index.names
    found = []
    for position, call in enumerate(reply.tool_calls):
        if call.name not in names:
            continue
        repeat = index.repeats.get((call.name, canonical(call.arguments)))
        if repeat is not None:
            found.append((position, repeat))
    return tuple(found)
