"""The guard policy and grounding policy a set of Settings stands for. Nothing here does I/O.

Shared by every door (the HTTP proxy, the Python API, the LiteLLM guardrail), so that
the same settings always mean the same ladder.
"""

from __future__ import annotations

import re

from reflexguard.core.fixes import FixPolicy
from reflexguard.core.ladder import GuardPolicy
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
        ),
        lift_text_calls=settings.tool_call_format == "content",
        on_exhausted=settings.on_exhausted,
    )


def grounding_policy(settings: Settings) -> GroundingPolicy:
    return GroundingPolicy(
        pattern=re.compile(settings.grounding_pattern) if settings.grounding else None,
        include_system=settings.grounding_include_system,
    )
