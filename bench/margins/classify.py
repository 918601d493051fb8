"""One decision's reply, classified with reflexguard's own validator and margins."""

from __future__ import annotations

from typing import Any

from reflexguard.core.channels import Channel
from reflexguard.core.completion import choices_of, lift_text_calls, reply_of
from reflexguard.core.margins import completion_margins
from reflexguard.core.model import ToolChoice
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply

NO_CALL = "no_call"  # a plain text answer: a decision for text instead of a call

_TOOLSETS = ToolSetCache()


def classify(completion: dict[str, Any], tools: list[dict[str, Any]],
             tool_choice: str) -> tuple[str | None, str]:
    """(the first call's name, its channel) for a reply written in content, as
    reflexguard sees an upstream declared `tool_call_format: content`."""
    choices = choices_of(completion)
    reply = lift_text_calls(reply_of(choices[0])) if choices else reply_of({})
    verdict = validate_reply(reply, CallRules(toolset=_TOOLSETS.get(tools),
                                              tool_choice=ToolChoice.parse(tool_choice)))
    name = reply.tool_calls[0].name if reply.tool_calls else None
    if not verdict.calls:
        return name, NO_CALL
    first = verdict.calls[0]
    channel = str(first.channel)
    if channel == Channel.CHOICE_VIOLATION and not reply.tool_calls:
        channel = NO_CALL  # tool_choice "required" (solo mode) answered with text
    return name or first.name, channel


def margins_of(completion: dict[str, Any]) -> tuple[float | None, float | None]:
    """(name margin, call margin) of the first call, or (None, call margin) for text."""
    found = completion_margins(completion)
    if not found:
        return None, None
    return found[0].name_margin, found[0].call_margin
