"""The words of a re-ask: what is wrong with each call, said so a small model can act on it.

Nothing here does I/O. Anything quoted back from model output is JSON-escaped,
truncated, and has chat-template control sequences broken up, so a reply cannot
smuggle instructions or special tokens into the repair prompt.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rapidfuzz import fuzz, process

from reflexguard.core.channels import Channel
from reflexguard.core.model import CallVerdict

QUOTE_LIMIT = 200
DETAIL_LIMIT = 600  # validator messages embed the offending value, which may be huge
# Chat-template control sequences: `<|im_start|>`, `<tool_call>`, `<start_of_turn>`,
# `</s>`, `<<SYS>>`, `[INST]`, `[TOOL_CALLS]`. A space after the opener keeps the text
# readable while no tokenizer can read it as a special token any more. One linear pass.
_MARKER = re.compile(r"<(?=[|/!A-Za-z<])|\|>|\[(?=/?[A-Z_]{2,}\])")
NAMES_LISTED = 25
FIX_INSTRUCTION = "Fix this and call the tool again with corrected arguments. Do not explain."
# After a call to a tool that is not offered, with arguments no offered tool takes
# (core/fit.py): the model may be right that no tool fits, so it is told it may say so.
NO_FIT_INSTRUCTION = (
    "None of the available tools takes these arguments. If one of them fits the request, "
    "call it. If none fits, do not call a tool: answer the user in plain text."
)
NOT_EXECUTED = (
    "Not executed, because another call in the same reply was invalid. "
    "Repeat this call if it is still needed."
)
REPLY_LEVEL_INSTRUCTION = {
    Channel.EMPTY_REPLY: "Your reply was empty. Answer the user or call one of the tools.",
    Channel.VANISHED_CALL: (
        "You wrote a tool call as text. Do not write it out: call the tool itself."
    ),
    Channel.CHOICE_VIOLATION: "You must call a tool now.",
}


def defang(text: str, limit: int) -> str:
    """Text from a model (or about one) made safe to put in a prompt: clipped, and with
    chat-template markers broken up."""
    clipped = text if len(text) <= limit else text[:limit] + "…"
    return _MARKER.sub(lambda m: m.group(0)[0] + " " + m.group(0)[1:], clipped)


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """Model output made safe to repeat back to the model: JSON-escaped and defanged."""
    clipped = text if len(text) <= limit else text[:limit] + "…"
    written = json.dumps(clipped, ensure_ascii=False)
    try:
        written.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, kept as its escape: no body holds it raw
        written = written.encode("utf-8", "backslashreplace").decode()
    return defang(written, limit * 7)


def closest_names(name: str, offered: list[str]) -> list[str]:
    """Offered tool names, the ones most like `name` first."""
    if not offered:
        return []
    ranked = process.extract(name, offered, scorer=fuzz.WRatio, limit=None)
    return [choice for choice, _score, _index in ranked]


def _names_line(names: list[str]) -> str:
    shown = names[:NAMES_LISTED]
    more = f" (and {len(names) - len(shown)} more)" if len(names) > len(shown) else ""
    return "Available tools: " + ", ".join(shown) + more + "."


SIGNATURE_LIMIT = 400


def _type_of(schema: object) -> str:
    if not isinstance(schema, dict):
        return "any"
    if isinstance(schema.get("enum"), list):
        return "|".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"][:8])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type_of(schema.get('items'))}"
    return kind if isinstance(kind, str) else "any"


def signature(name: str, parameters: dict[str, Any]) -> str:
    """A compact, readable signature: `cancel(order_id: string, reason: "a"|"b"?)`."""
    properties = parameters.get("properties")
    required = parameters.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    parts = []
    if isinstance(properties, dict):
        for prop, schema in properties.items():
            optional = "" if prop in required_names else "?"
            parts.append(f"{prop}{optional}: {_type_of(schema)}")
    text = f"{name}({', '.join(parts)})"
    return text if len(text) <= SIGNATURE_LIMIT else text[:SIGNATURE_LIMIT] + "…)"


def describe_call_error(verdict: CallVerdict, arguments: str, offered: list[str],
                        parameters: dict[str, Any] | None = None,
                        no_fit: bool = False) -> str:
    """The content of the tool message answering one failed call; `no_fit` when the
    reply reached for a tool that is not there at all (core/fit.py)."""
    name = quote(verdict.name or "")
    detail = defang(verdict.detail, DETAIL_LIMIT)
    channel = verdict.channel
    expected = (f" Its parameters: {signature(verdict.name or '', parameters)} "
                "(? marks optional)." if parameters is not None else "")
    if channel in (Channel.OK, Channel.CHECK_FAULT):  # no error of the model's to describe
        return NOT_EXECUTED
    if channel is Channel.REPEATED_CALL:
        return verdict.detail  # written by repeated_call_note, its quote already defanged
    if channel is Channel.UNKNOWN_TOOL:
        closest = closest_names(verdict.name or "", offered)
        if no_fit:
            return (f"Error: there is no tool named {name}. {_names_line(closest)} "
                    f"{NO_FIT_INSTRUCTION}")
        return (
            f"Error: there is no tool named {name}. "
            f"{_names_line(closest)} Call one of these. {FIX_INSTRUCTION}"
        )
    if channel is Channel.MALFORMED_ARGS:
        return (
            f"Error: the arguments of {name} are not one valid JSON object: "
            f"{detail}. You sent {quote(arguments)}.{expected} {FIX_INSTRUCTION}"
        )
    if channel is Channel.SCHEMA_VIOLATION:
        return (
            f"Error: the arguments of {name} do not match its parameters: "
            f"{detail}.{expected} {FIX_INSTRUCTION}"
        )
    if channel is Channel.UNGROUNDED_ENTITY:
        return (
            f"Error: {detail}. Do not invent identifiers: use one the user gave "
            "or a tool returned, or ask the user for it."
        )
    return f"Error: {detail}. {FIX_INSTRUCTION}"


RESULT_QUOTE_LIMIT = 300  # how much of the repeated result the note quotes


def repeated_call_note(name: str, times: int, result: str) -> str:
    """What the loop guard's re-ask says about a call that repeats (core/loop_guard.py):
    what was repeated, how often, what it returned (quoted, clipped and defanged: tool
    output is as untrusted as model output), and what to do instead. Not "Error:": the
    call did not fail, and nothing here is counted against an error budget."""
    return (
        f"Not executed: you already called {quote(name)} with exactly these arguments "
        f"{times} times since the user's last message, and every time it returned the same "
        f"result: {quote(result, RESULT_QUOTE_LIMIT)}. Calling it again will return the "
        "same. Use that result: call a different tool or the same tool with different "
        "arguments if something is still missing, or answer the user."
    )


def loop_stopped_text(name: str, times: int, result: str) -> str:
    """What the agent gets instead of a repeated call under `loop_guard: stop`: a text
    answer that ends the loop, saying it is reflexguard's (not the model's) and what the
    call returned, quoted, clipped and defanged as in the re-ask's note."""
    return (
        f"[reflexguard stopped a repeated tool call] {quote(name)} was already called with "
        f"exactly these arguments {times} times since the user's last message, and every "
        f"time it returned the same result: {quote(result, RESULT_QUOTE_LIMIT)}."
    )


def describe_reply_error(verdicts: list[CallVerdict], offered: list[str]) -> str:
    """The instruction after a reply that failed without any call to answer."""
    channel = verdicts[0].channel if verdicts else Channel.EMPTY_REPLY
    instruction = REPLY_LEVEL_INSTRUCTION.get(channel, FIX_INSTRUCTION)
    if channel is Channel.CHOICE_VIOLATION and verdicts[0].detail:
        instruction = f"Error: {defang(verdicts[0].detail, DETAIL_LIMIT)}. {instruction}"
    return f"{instruction} {_names_line(offered)}"
