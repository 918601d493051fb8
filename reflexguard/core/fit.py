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
are a JSON object with at least one key, none of which is a parameter of any offered tool.
Empty or malformed arguments say nothing either way and keep the ladder as it was. Every
unknown name that repair fixed in the 50-case BFCL run passed arguments whose keys matched
the intended tool's (`simple_python_281`, `simple_python_294`, `multiple_86`,
`multiple_182`), so the rule leaves them alone.
"""

from __future__ import annotations

from reflexguard.core.channels import Channel
from reflexguard.core.model import Reply, Verdict
from reflexguard.core.toolset import ToolSet
from reflexguard.core.validate import _Malformed, parse_arguments


def offered_parameters(toolset: ToolSet) -> frozenset[str]:
    """Every top-level parameter name of every offered tool."""
    names: set[str] = set()
    for spec in toolset.specs.values():
        properties = spec.parameters.get("properties")
        if isinstance(properties, dict):
            names.update(key for key in properties if isinstance(key, str))
    return frozenset(names)


def _argument_keys(arguments: str) -> frozenset[str] | None:
    try:
        return frozenset(parse_arguments(arguments))
    except _Malformed:
        return None


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
        keys = _argument_keys(call.arguments)
        if not keys:  # malformed or empty: no evidence either way
            return False
        if parameters is None:  # only computed for a reply that got this far
            parameters = offered_parameters(toolset)
        if keys & parameters:
            return False
    return True
