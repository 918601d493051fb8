"""Sorting tau2's failed tool calls into channels. Nothing here does I/O.

tau2's environment turns any exception into `"Error: <message>"` with `error=True`:
unknown names raise `ValueError("Tool 'x' not found.")`, missing or extra arguments
raise `TypeError`, and everything else the tool raises is a domain error.
"""

from __future__ import annotations

import re

UNKNOWN = re.compile(r"Tool '(?P<name>.*)' not found")
ARGUMENT = re.compile(
    r"(missing \d+ required|unexpected keyword argument|positional argument|"
    r"validation error for|Input should be|Field required)"
)


def env_channel(content: str, name: str, user_tool_names: frozenset[str]) -> str:
    """The channel of an error tool message, from its text and the called name."""
    if UNKNOWN.search(content):
        return "wrong_side_tool" if name in user_tool_names else "unknown_tool"
    if ARGUMENT.search(content):
        return "argument_error"
    return "domain_error"
