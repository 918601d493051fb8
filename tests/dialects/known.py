"""What the known-tools tests compare a request by: everything its reading made."""

from __future__ import annotations

from typing import Any

from reflexguard.dialects.native import DialectRequest


def seen(request: DialectRequest) -> tuple[Any, ...]:
    rules = request.chat.rules
    return (request.body, request.chat.fields, request.dropped, request.chat.model,
            request.chat.stream, None if rules is None else (
                rules.toolset.digest, rules.tool_choice, rules.parallel_tool_calls))
