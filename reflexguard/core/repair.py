"""Building the requests of the repair ladder. Nothing here does I/O.

Every function returns new objects: the caller's body and message list are never
mutated, because the agent may reuse them (instructor shipped that bug).

Each re-ask shows the model only its latest failed reply, not the whole history of
failures, so the prompt grows by one exchange at most and the upstream's prefix
cache still covers the original conversation.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from reflexguard.core.completion import message_of
from reflexguard.core.feedback import (
    QUOTE_LIMIT,
    closest_names,
    defang,
    describe_call_error,
    describe_reply_error,
)
from reflexguard.core.fit import no_tool_fits
from reflexguard.core.model import JsonObject, Reply, ToolCall, Verdict
from reflexguard.core.tool_records import ToolSet
from reflexguard.core.validate import _Malformed, parse_arguments

ConstrainedMode = Literal["off", "tool_choice", "structured_outputs", "response_format"]
STREAM_ONLY_FIELDS = ("stream", "stream_options")
ECHO_LIMIT = 4096  # echoed arguments past this are replaced by {} (the error says why)
# Where each wire format keeps its answer's length limit: chat (either spelling; OpenAI's
# newer one first, as a client that uses it may be refused the older), Messages, Responses.
LENGTH_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
REASK_TOKENS_FLOOR = 256
REASK_TOKENS_CEILING = 2048
REASK_TOKENS_FACTOR = 2


@dataclass(frozen=True)
class ReaskTokens:
    """How many tokens a re-ask may answer with (docs/repair.md, "The length of a
    re-ask"): `fixed` when set, else REASK_TOKENS_FACTOR times the first answer's
    completion tokens, within [floor, ceiling] (the ceiling when the upstream reported no
    usage) but never below the first answer's length plus the floor; never more than the
    client's own limit."""

    fixed: int | None = None
    floor: int = REASK_TOKENS_FLOOR
    ceiling: int = REASK_TOKENS_CEILING

    def limit(self, first_tokens: int | None, client: int | None) -> int:
        if self.fixed is not None:
            derived = self.fixed
        elif first_tokens is None:
            derived = self.ceiling
        else:
            # Never less than the first answer's own length plus the floor: a re-ask that
            # corrects a call must have room to write it again (a 3,000-token call under a
            # 2,048 ceiling would be cut off every time). The ceiling bounds the factor,
            # never this room: a 1,900-token call gets 2,156, a 17-token one 273.
            derived = max(min(max(first_tokens * REASK_TOKENS_FACTOR, self.floor),
                              self.ceiling), first_tokens + self.floor)
        return derived if client is None else min(client, derived)


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def completion_tokens(completion: JsonObject) -> int | None:
    """The completion tokens an answer reports (every dialect's reading is chat's)."""
    usage = completion.get("usage")
    return _positive_int(usage.get("completion_tokens")) if isinstance(usage, dict) else None


def client_token_limit(body: JsonObject) -> int | None:
    """The smallest length limit the client set in its request, in any wire format."""
    limits = [v for name in LENGTH_FIELDS if (v := _positive_int(body.get(name))) is not None]
    return min(limits) if limits else None


def bounded(body: JsonObject, limit: int) -> JsonObject:
    """A copy of a re-ask body that answers in at most `limit` tokens: every length field
    the client used is lowered to it; with none, the wire format's own is added
    (`max_output_tokens` for a Responses body, which has `input` and no `messages`;
    `max_tokens`, which Messages requires and every chat server reads, otherwise)."""
    present = [name for name in LENGTH_FIELDS if name in body]
    if not present:
        present = ["max_output_tokens" if "input" in body and "messages" not in body
                   else "max_tokens"]
    return {**body, **{name: limit for name in present}}


def _echoable(call: ToolCall) -> ToolCall:
    """The call as it can be shown back: chat templates parse echoed arguments as JSON,
    and may read template markers in them as special tokens. The arguments are parsed
    and written again (so `\\u003c|` escapes cannot hide a marker), then defanged, which
    only inserts spaces inside JSON strings, so JSON stays JSON."""
    name = defang(call.name, QUOTE_LIMIT)
    if len(call.arguments) > ECHO_LIMIT:
        return ToolCall(id=call.id, name=name, arguments="{}")
    try:
        parsed = parse_arguments(call.arguments)
    except _Malformed:
        return ToolCall(id=call.id, name=name, arguments="{}")
    try:
        plain = json.dumps(parsed, ensure_ascii=False)
    except (ValueError, RecursionError):
        return ToolCall(id=call.id, name=name, arguments="{}")
    return ToolCall(id=call.id, name=name, arguments=defang(plain, len(plain)))


def _echoable_text(content: str) -> str:
    """Reply text as it can be shown back. Text that is JSON (a call written as text, which
    a tool parser may read as one) is written again first, as `_echoable` does for
    arguments, so that `\u003c|` escapes cannot hide a marker from `defang`."""
    if content[:1] in ("{", "[") and len(content) <= ECHO_LIMIT:
        with contextlib.suppress(ValueError, RecursionError):
            content = json.dumps(json.loads(content), ensure_ascii=False)
    return defang(content, ECHO_LIMIT)


def shown_reply(reply: Reply) -> Reply:
    """The failed reply as it can be echoed back to the model, in any dialect."""
    return Reply(content=_echoable_text(reply.content or ""),
                 tool_calls=tuple(map(_echoable, reply.tool_calls)))


def call_feedback(reply: Reply, verdict: Verdict, toolset: ToolSet) -> list[tuple[str, str]]:
    """(call id, what is wrong with it) for every call of a reply that has calls: the
    text each dialect wraps in its own tool-result form."""
    by_index = {v.index: v for v in verdict.calls if v.index is not None}
    no_fit = no_tool_fits(reply, verdict, toolset)
    feedback: list[tuple[str, str]] = []
    for index, call in enumerate(reply.tool_calls):
        spec = toolset.get(call.name)
        feedback.append((call.id, describe_call_error(
            by_index[index], call.arguments, toolset.names, spec.parameters if spec else None,
            no_fit=no_fit)))
    return feedback


def reply_feedback(verdict: Verdict, toolset: ToolSet) -> str:
    """The instruction for a reply without calls, in any dialect."""
    return describe_reply_error(list(verdict.calls), toolset.names)


def repair_messages(
    messages: list[Any], reply: Reply, verdict: Verdict, toolset: ToolSet
) -> list[Any]:
    """The original messages, the failed reply, and what is wrong with it."""
    if reply.tool_calls:
        # Content is "" rather than null: llama-cpp-python rejects null assistant content.
        feedback: list[JsonObject] = [
            {"role": "tool", "tool_call_id": call_id, "content": content}
            for call_id, content in call_feedback(reply, verdict, toolset)]
        return [*messages, message_of(shown_reply(reply)), *feedback]
    assistant = {"role": "assistant", "content": _echoable_text(reply.content or "")}
    instruction = {"role": "user", "content": reply_feedback(verdict, toolset)}
    return [*messages, assistant, instruction]


def reask_body(body: JsonObject, reply: Reply, verdict: Verdict, toolset: ToolSet) -> JsonObject:
    messages = body.get("messages")
    assert isinstance(messages, list)  # the server checked the envelope before we got here
    new_body = {k: v for k, v in body.items() if k not in STREAM_ONLY_FIELDS}
    new_body["messages"] = repair_messages(messages, reply, verdict, toolset)
    return new_body


def intended_tools(reply: Reply, verdict: Verdict, toolset: ToolSet) -> list[str]:
    """The offered tools the failed reply was most likely reaching for."""
    wanted: list[str] = []
    for call_verdict in verdict.calls:
        if not call_verdict.name:
            continue
        closest = closest_names(call_verdict.name, toolset.names)
        if closest and closest[0] not in wanted:
            wanted.append(closest[0])
    return wanted


MAX_EXACT_VARIANTS = 8


def call_schema(toolset: ToolSet, names: list[str]) -> JsonObject:
    """A JSON Schema whose instances are exactly the valid calls of `names`.

    Past MAX_EXACT_VARIANTS tools only the name is constrained and the arguments are
    validated afterwards: a grammar over dozens of full schemas took llama.cpp minutes
    to decode under (tau2 telecom solo offers 44 tools).
    """
    if len(names) > MAX_EXACT_VARIANTS:
        return {
            "type": "object",
            "properties": {"name": {"type": "string", "enum": names},
                           "arguments": {"type": "object"}},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
    variants = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [name]},
                "arguments": toolset.specs[name].parameters,
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name in names
    ]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


# The one other shape a JSON-constrained attempt may take while the client allows text
# (`tool_choice` absent or "auto"): an answer without a call. Forcing a call there turned
# BFCL irrelevance answers the checker scored as abstaining into calls with invented
# values (issue 20): the constraint is for well-formed output, not for calling.
ABSTAIN_KEY = "answer"
ABSTAIN_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {ABSTAIN_KEY: {"type": "string"}},
    "required": [ABSTAIN_KEY],
    "additionalProperties": False,
}


def allows_text(body: JsonObject) -> bool:
    """Whether the client's request lets the model answer without calling a tool."""
    return body.get("tool_choice") in (None, "auto")


def _with_abstention(schema: JsonObject) -> JsonObject:
    variants = schema.get("anyOf", [schema])
    return {"anyOf": [*variants, ABSTAIN_SCHEMA]}


def constrain(
    body: JsonObject, mode: ConstrainedMode, reply: Reply, verdict: Verdict, toolset: ToolSet
) -> JsonObject:
    """A copy of a re-ask body that forces well-formed output, for upstreams that can: a
    valid call, or (JSON modes, when the client allows text) an answer without one; only
    that answer when the reply reached for a tool that is not there (core/fit.py)."""
    if mode == "off" or not toolset.names:
        return body
    if allows_text(body) and no_tool_fits(reply, verdict, toolset):
        if mode == "tool_choice":
            return {**body, "tool_choice": "none"}
        return _json_constraint(body, mode, ABSTAIN_SCHEMA)
    wanted = intended_tools(reply, verdict, toolset)
    names = wanted or toolset.names
    schema = call_schema(toolset, names)
    if allows_text(body):
        schema = _with_abstention(schema)
    if mode == "tool_choice":
        if len(names) == 1:
            return {**body, "tool_choice": {"type": "function", "function": {"name": names[0]}}}
        return {**body, "tool_choice": "required"}
    return _json_constraint(body, mode, schema)


def _json_constraint(body: JsonObject, mode: ConstrainedMode, schema: JsonObject) -> JsonObject:
    if mode == "structured_outputs":
        return {**body, "structured_outputs": {"json": schema}}
    # `json_object` with a `schema` is the form both llama.cpp's server and
    # llama-cpp-python's accept (the latter rejects OpenAI's `json_schema` type).
    return {**body, "response_format": {"type": "json_object", "schema": schema}}
