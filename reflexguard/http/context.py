"""What every request handler shares: settings, the upstream client, telemetry, the
compiled tool-set cache, and the guard policy derived from the settings.

This is an I/O edge only by what it holds; building it opens nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from reflexguard.core.fixes import FixPolicy
from reflexguard.core.ladder import GuardPolicy
from reflexguard.core.toolset import ToolSetCache
from reflexguard.dialects.chat_request import GroundingPolicy
from reflexguard.http.upstream import Upstream
from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import Telemetry

# (HTTP status, body) for /healthz when something supervises the upstream (serve.py sets it
# for the embedded model: starting / ready / restarting / failed).
HealthCheck = Callable[[], tuple[int, dict[str, Any]]]


class GuardContext:
    """The state the handlers share: caches, policy, telemetry."""

    def __init__(self, settings: Settings, upstream: Upstream, telemetry: Telemetry) -> None:
        self.settings = settings
        self.upstream = upstream
        self.telemetry = telemetry
        self.health: HealthCheck | None = None
        self.toolsets = ToolSetCache()
        self.grounding = GroundingPolicy(
            pattern=re.compile(settings.grounding_pattern) if settings.grounding else None,
            include_system=settings.grounding_include_system,
        )
        self.policy = GuardPolicy(
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
