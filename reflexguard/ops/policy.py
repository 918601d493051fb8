"""The guard policy and grounding policy a set of Settings stands for, and a request's
error budget under them. Nothing here does I/O.

Shared by every door (the HTTP proxy, the Python API, the LiteLLM guardrail), so that
the same settings always mean the same ladder.
"""

from __future__ import annotations

import re
from functools import lru_cache

from reflexguard.core.budget import (
    Budget,
    chat_errors,
    messages_errors,
    parse_budget,
    responses_errors,
)
from reflexguard.core.fixes import FixPolicy
from reflexguard.core.ladder import GuardPolicy
from reflexguard.core.loop_guard import LoopPolicy
from reflexguard.core.model import JsonObject
from reflexguard.core.repair import ReaskTokens
from reflexguard.dialects.chat_request import GroundingPolicy
from reflexguard.ops.config import Settings


def guard_policy(settings: Settings) -> GuardPolicy:
    return GuardPolicy(
        repair=settings.repair,
        max_repairs=settings.max_repairs,
        constrained=settings.constrained_retry,
        fixes=FixPolicy(
            json_repair=settings.json_repair,
            snap_names=settings.snap_names,
            snap_threshold=settings.snap_threshold,
            safe=settings.safe_fixes,
        ),
        lift_text_calls=settings.tool_call_format == "content",
        on_exhausted=settings.on_exhausted,
        reask_tokens=ReaskTokens(settings.reask_max_tokens, settings.reask_tokens_floor,
                                 max(settings.reask_tokens_ceiling, settings.reask_tokens_floor)),
    )


def loop_policy(settings: Settings) -> LoopPolicy:
    return LoopPolicy(settings.loop_guard, settings.loop_repeats)


def grounding_policy(settings: Settings, forced: bool = False) -> GroundingPolicy:
    """`forced`: the check on whatever `grounding` says (a low error budget turns it on)."""
    return GroundingPolicy(
        pattern=_compiled(settings.grounding_pattern) if settings.grounding or forced
        else None,
        include_system=settings.grounding_include_system,
        # Anthropic's is_error results reach this view prefixed "Error: " (messages.py).
        failed_result=_compiled(settings.tool_error_pattern),
    )


@lru_cache(maxsize=16)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def request_budget(header: str | None, dialect: str, body: JsonObject,
                   settings: Settings) -> Budget | None:
    """The request's budget (the header's, else `error_budget`) and what its conversation
    has spent; None, without reading the body, when neither is set. Raises BadRequest for a
    header that is not a budget. `body` is the request as the client sent it, in `dialect`."""
    if header is None and settings.error_budget is None:
        return None
    limit = parse_budget(header) if header is not None else settings.error_budget
    assert limit is not None
    return Budget(limit, spent_errors(dialect, body, settings))


def spent_errors(dialect: str, body: JsonObject, settings: Settings) -> int:
    """Failed tool results in a request's conversation, read in its own wire format."""
    if dialect == "messages":
        messages = body.get("messages")
        return messages_errors(messages) if isinstance(messages, list) else 0
    if dialect == "responses":
        return responses_errors(body.get("input"), _compiled(settings.responses_error_pattern))
    messages = body.get("messages")
    return chat_errors(messages, _compiled(settings.tool_error_pattern)) \
        if isinstance(messages, list) else 0
