"""Whether a failed reply reached for a tool that is not there at all. Nothing here does I/O.

A call to an unknown name is usually a near miss: the model meant an offered tool and got
its name wrong (`get_weather` for `get_current_weather`), and its arguments show it by
using that tool's parameter names. Sometimes it is the opposite: the request needs a tool
nobody offered, and the model invents one (`Ice Cream Store` with `{"flavour": ...}` when
only `game_guide` exists). Re-asking with "call one of these" and then constraining the
answer to a call of whatever is offered turns that honest "no tool fits" into a call of an
unrelated tool: in the 50-case BFCL run it broke 3 `irrelevance` answers that repair off
had right (issue 20). So the ladder reads such a reply as a signal, not a slip: the re-ask
says that answering without a tool is allowed, and the constrained attempt, where the
client allows text, may only answer in text (docs/repair.md, "No tool fits").

The rule needs positive evidence, because a near miss wrongly read as "no fit" would lose a
call the agent needed: every call of the reply is an unknown name, and each one's arguments
name at least one key, none of which is a parameter of any offered tool. Arguments that are
not valid JSON are read for their keys leniently (every quoted string followed by a colon):
in the 100-case run, 7 of the 10 `irrelevance` answers repair broke at Q2_K were invented
tools with broken JSON, often a JSON Schema echoed as arguments (`{"type": "object",
"properties": {...}`), whose keyword keys (`type`, `properties`, ...) are then set aside.
Empty arguments say nothing either way and keep the ladder as it was. Every unknown name
that repair fixed in the BFCL runs passed arguments whose keys matched the intended tool's
(`simple_python_281`, `simple_python_294`, `multiple_86`, `multiple_182`), so the rule
leaves them alone.
"""

from __future__ import annotations

import re

from reflexguard.core.channels import Channel
from reflexguard.core.model import Reply, Verdict
from reflexguard.core.tool_records import ToolSet
from reflexguard.core.validate import _Malformed, parse_arguments

# A key in text that is not valid JSON: a quoted string (at most 200 characters, escapes
# allowed) followed by a colon. One linear pass; the ladder never re-asks a reply whose
# arguments pass 256 Ki characters (ladder.MAX_REASK_REPLY_CHARS), so that bounds the text.
_LENIENT_KEY = re.compile(r'"((?:[^"\\\n]|\\.){1,200})"\s*:')
# A JSON Schema written where arguments belong: its keywords are not the model's keys.
_SCHEMA_MARKERS = frozenset({"type", "properties"})
_SCHEMA_KEYWORDS = frozenset({"type", "properties", "description", "required", "items",
                              "enum", "default", "format", "title", "additionalProperties",
                              "$schema"})


def offered_parameters(toolset: ToolSet) -> frozenset[str]:
    """Every top-level parameter name of every offered tool."""
    names: set[str] = set()
    for spec in toolset.specs.values():
        properties = spec.parameters.get("properties")
        if isinstance(properties, dict):
            names.update(key for key in properties if isinstance(key, str))
    return frozenset(names)


def argument_keys(arguments: str) -> frozenset[str]:
    """The keys the arguments name: a JSON object's own keys, or for text that is not
    valid JSON every quoted string followed by a colon; a JSON Schema's keywords set aside
    when the arguments are one (`type` and `properties` both among the keys)."""
    try:
        keys = frozenset(parse_arguments(arguments))
    except _Malformed:
        keys = frozenset(m.group(1) for m in _LENIENT_KEY.finditer(arguments))
    if keys >= _SCHEMA_MARKERS:
        keys = keys - _SCHEMA_KEYWORDS
    return keys


def no_tool_fits(reply: Reply, verdict: Verdict, toolset: ToolSet) -> bool:
    """True when every call of the reply names a tool that is not offered and passes
    arguments that share no key with any offered tool's parameters."""
    if not reply.tool_calls or not toolset.names:
        return False
    by_index = {v.index: v for v in verdict.calls if v.index is not None}
    parameters: frozenset[str] | None = None
    for index, call in enumerate(reply.tool_calls):
        call_verdict = by_index.get(index)
        if call_verdict is None or call_verdict.channel is not Channel.UNKNOWN_TOOL:
            return False
        keys = argument_keys(call.arguments)
        if not keys:  # empty (or nothing readable): no evidence either way
            return False
        if parameters is None:  # only computed for a reply that got this far
            parameters = offered_parameters(toolset)
        if keys & parameters:
            return False
    return True
