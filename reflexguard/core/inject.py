"""Fault injection: a reply's tool calls damaged, seeded, the way small models damage them.

Nothing here does I/O. `inject` is a pure function of the reply, the offered tools, the
spec and a key: the same request (the same conversation and tools, the same seed) gets
the same faults, whichever arm, route or stream it came through, so the repair-off and
repair-on arms of one episode see the same damage on their first answers.

Each call gets its own random stream, sha256(seed, key, call index): one uniform draw
picks its channel (or none) by the rates, and the same stream then shapes the damage.
A fault is only put on a call that is sound in that respect (an offered name, arguments
that parse); a call it cannot be put on is left as it is and reported as skipped, never
silently counted as injected.

The damage, from what the bench recorded (docs/decisions.md, "Injected faults"):
- unknown_tool: a near miss of the called tool's name (or, one time in five, of another
  offered tool's): its namespace prefix dropped (`math_factorial` -> `factorial`), its
  separator changed (`employee_fetch_data` -> `employee.fetch_data`), written as words
  (`multiplayer_game_finder` -> `Multiplayer Game Finder`) or made plural
  (`delete_task` -> `delete_tasks`). Each tool has few near misses, so the same wrong
  names recur: the paper's "same mistakes, more often".
- malformed_args: the arguments' JSON cut off (a reply that ran into its length) or
  written with single quotes (a Python dict).
- schema_violation: a required argument dropped, or one given the wrong type (a value
  wrapped in a list, a list replaced by its first item).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from reflexguard.core.channels import Channel
from reflexguard.core.fault_spec import FaultSpec
from reflexguard.core.model import Reply, ToolCall
from reflexguard.core.tool_records import ToolSet

# The fields of a request that make up its conversation, in any dialect: the key of the
# random streams. Sampling knobs, `stream` and ids are left out on purpose, so a stream and
# a non-streamed request of one conversation draw the same faults.
CONVERSATION_FIELDS = ("system", "instructions", "messages", "input")
OTHER_TOOL_SHARE = 0.2  # how often the near miss is of another offered tool than the called
# How often each kind of near miss was seen among the recorded wrong names (weights).
NAME_MUTATIONS = (("prefix_dropped", 4), ("separator", 2), ("words", 2), ("plural", 1))


@dataclass(frozen=True)
class InjectedFault:
    """One fault put on one call: which, and what was done (for the events file)."""

    index: int
    channel: Channel
    detail: str


@dataclass(frozen=True)
class SkippedFault:
    """A fault drawn for a call it could not be put on (why: for the fallback count)."""

    index: int
    channel: Channel
    reason: str


class UnkeyableRequest(ValueError):
    """orjson cannot write the conversation (past its depth or integer range): the caller
    takes `fallback_key` and counts it."""


def request_key(body: Mapping[str, Any], toolset_digest: str) -> bytes:
    """A stable key of a request's conversation and tools (canonical JSON, sorted keys).
    Raises UnkeyableRequest where orjson cannot write it."""
    conversation = {k: body[k] for k in CONVERSATION_FIELDS if k in body}
    try:
        text = orjson.dumps(conversation, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        raise UnkeyableRequest("the conversation cannot be written as canonical JSON") from None
    return hashlib.sha256(toolset_digest.encode() + b"\0" + text).digest()


def fallback_key(body: Mapping[str, Any], toolset_digest: str) -> bytes:
    """A key for a conversation orjson refused: its repr, stable for the same input."""
    conversation = sorted((k, repr(body[k])) for k in CONVERSATION_FIELDS if k in body)
    text = repr(conversation).encode("utf-8", "surrogatepass")
    return hashlib.sha256(toolset_digest.encode() + b"\1" + text).digest()


def call_stream(seed: int, key: bytes, index: int) -> random.Random:
    """The random stream of call `index` of the reply to the request keyed `key`."""
    digest = hashlib.sha256(b"%d\0%d\0" % (seed, index) + key).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def drawn_channel(spec: FaultSpec, draw: float) -> Channel | None:
    """The channel a uniform draw in [0, 1) falls into, or None (no fault)."""
    edge = 0.0
    for channel, rate in spec.rates:
        edge += rate
        if draw < edge:
            return channel
    return None


def _words(name: str) -> list[str]:
    words: list[str] = []
    current = ""
    for char in name:
        if char in "._- ":
            if current:
                words.append(current)
            current = ""
        elif char.isupper() and current and not current[-1].isupper():
            words.append(current)
            current = char
        else:
            current += char
    if current:
        words.append(current)
    return words


def name_variants(name: str) -> dict[str, str]:
    """The near misses of `name`, by kind (only those that differ from it)."""
    words = _words(name)
    variants: dict[str, str] = {}
    if "." in name:
        variants["prefix_dropped"] = name.split(".", 1)[1]
    elif len(words) >= 3 or ("_" in name and len(words) >= 2):
        variants["prefix_dropped"] = name.split("_", 1)[1] if "_" in name else "".join(words[1:])
    if "_" in name:
        variants["separator"] = name.replace("_", ".", 1)
    elif "." in name:
        variants["separator"] = name.replace(".", "_")
    elif len(words) >= 2:
        variants["separator"] = "_".join(w.lower() for w in words)
    if len(words) >= 2:
        variants["words"] = " ".join(w[:1].upper() + w[1:] for w in words)
    variants["plural"] = name[:-1] if name.endswith("s") and len(name) > 1 else name + "s"
    return {kind: v for kind, v in variants.items() if v and v != name}


def near_miss(name: str, offered: list[str], rng: random.Random) -> tuple[str, str] | None:
    """A wrong name near `name` that is no offered tool's, and its kind; None if none."""
    taken = set(offered)
    variants = {k: v for k, v in name_variants(name).items() if v not in taken}
    if not variants:
        return None
    kinds = [(kind, weight) for kind, weight in NAME_MUTATIONS if kind in variants]
    kind = rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
    return variants[kind], kind


def _loads(arguments: str) -> Any:
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return _NOT_JSON


_NOT_JSON = object()


def _unknown_tool(call: ToolCall, toolset: ToolSet, rng: random.Random) -> tuple[ToolCall,
                                                                                   str] | str:
    names = toolset.names
    if toolset.get(call.name) is None:
        return "the call's name is already no offered tool's"
    others = [n for n in names if n != call.name]
    source = rng.choice(others) if others and rng.random() < OTHER_TOOL_SHARE else call.name
    missed = near_miss(source, names, rng) or near_miss(call.name, names, rng)
    if missed is None:
        return "no near miss of the name is free"
    wrong, kind = missed
    of = "the called tool" if source == call.name else f"another offered tool ({source!r})"
    return (call.model_copy(update={"name": wrong}),
            f"name {call.name!r} -> {wrong!r} ({kind}, a near miss of {of})")


def _malformed(call: ToolCall, rng: random.Random) -> tuple[ToolCall, str] | str:
    text = call.arguments
    if _loads(text) is _NOT_JSON:
        return "the arguments are already not JSON"
    modes = ["cut", "single_quotes"] if '"' in text else ["cut"]
    rng.shuffle(modes)
    for mode in modes:
        if mode == "cut" and len(text) >= 2:
            broken = text[:rng.randrange(1, len(text))]
        elif mode == "single_quotes":
            broken = text.replace('"', "'")
        else:
            continue
        if _loads(broken) is _NOT_JSON:
            return (call.model_copy(update={"arguments": broken}),
                    f"arguments {mode.replace('_', ' ')} ({len(text)} -> {len(broken)} chars)")
    return "the arguments are too short to break"


def _wrong_type(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else {}
    return [value]


def _schema_violation(call: ToolCall, toolset: ToolSet,
                      rng: random.Random) -> tuple[ToolCall, str] | str:
    spec = toolset.get(call.name)
    if spec is None:
        return "the call's name is no offered tool's"
    arguments = _loads(call.arguments)
    if not isinstance(arguments, dict):
        return "the arguments are not a JSON object"
    required = spec.parameters.get("required")
    droppable = [k for k in (required if isinstance(required, list) else []) if k in arguments]
    options: list[tuple[str, str]] = [("drop", k) for k in droppable]
    options += [("retype", k) for k in arguments]
    rng.shuffle(options)
    # A drop first where one can be made: a missing required argument is the error the
    # recorded runs show most (docs/decisions.md).
    options.sort(key=lambda option: option[0] != "drop" or rng.random() < 0.5)
    for action, key in options:
        changed = dict(arguments)
        if action == "drop":
            del changed[key]
        else:
            changed[key] = _wrong_type(changed[key])
        if not spec.accepts(changed):
            detail = (f"required argument {key!r} dropped" if action == "drop" else
                      f"argument {key!r} given the wrong type")
            return call.model_copy(update={"arguments": orjson.dumps(changed).decode()}), detail
    return "no argument can be dropped or mistyped against the schema"


def _damage(channel: Channel, call: ToolCall, toolset: ToolSet,
            rng: random.Random) -> tuple[ToolCall, str] | str:
    if channel is Channel.UNKNOWN_TOOL:
        return _unknown_tool(call, toolset, rng)
    if channel is Channel.MALFORMED_ARGS:
        return _malformed(call, rng)
    return _schema_violation(call, toolset, rng)


def inject(reply: Reply, toolset: ToolSet, spec: FaultSpec, key: bytes, seed: int | None = None,
           expressible: frozenset[Channel] | None = None,
           ) -> tuple[Reply, tuple[InjectedFault, ...], tuple[SkippedFault, ...]]:
    """The reply with its calls damaged at the spec's rates, what was injected, and what
    was drawn but could not be. `seed` overrides the spec's (one request's, by header);
    a channel outside `expressible` (a dialect whose wire format cannot carry it) is drawn
    as always, so the other channels' draws stay the same, and reported as skipped."""
    if not reply.tool_calls:
        return reply, (), ()
    seed = spec.seed if seed is None else seed
    calls = list(reply.tool_calls)
    injected: list[InjectedFault] = []
    skipped: list[SkippedFault] = []
    for index, call in enumerate(calls):
        rng = call_stream(seed, key, index)
        channel = drawn_channel(spec, rng.random())
        if channel is None:
            continue
        if expressible is not None and channel not in expressible:
            skipped.append(SkippedFault(index, channel, "not expressible in this dialect"))
            continue
        damaged = _damage(channel, call, toolset, rng)
        if isinstance(damaged, str):
            skipped.append(SkippedFault(index, channel, damaged))
            continue
        calls[index], detail = damaged
        injected.append(InjectedFault(index, channel, detail))
    if not injected:
        return reply, (), tuple(skipped)
    return reply.model_copy(update={"tool_calls": tuple(calls)}), tuple(injected), tuple(skipped)
