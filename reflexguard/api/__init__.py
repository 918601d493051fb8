"""reflexguard without a hop: the same guard, in the caller's process.

    guarded = reflexguard.guard(openai.OpenAI(...), max_repairs=2)
    guarded.chat.completions.create(...)          # validated and repaired

    llm = reflexguard.guard_litellm(max_repairs=2)
    llm.completion(model=..., messages=..., tools=...)

Keyword arguments are `Settings` fields (`docs/config.md`), over `REFLEXGUARD_*`
variables, over the defaults; a YAML file can be named with `config=`. The client
libraries are imported only when a guard is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from reflexguard.api.engine import Guard
from reflexguard.api.errors import ReflexguardError, RepairExhausted, UpstreamStreamCut
from reflexguard.ops.config import load_settings

if TYPE_CHECKING:
    from reflexguard.api.litellm_calls import GuardedLiteLLM
    from reflexguard.api.openai_client import GuardedClient

__all__ = ["ReflexguardError", "RepairExhausted", "UpstreamStreamCut", "guard",
           "guard_litellm", "settings_guard"]


def settings_guard(config: str | Path | None = None, **policy: Any) -> Guard:
    """A `Guard` from keyword arguments over `REFLEXGUARD_*` over the YAML file."""
    return Guard(load_settings(policy, Path(config) if config is not None else None))


def guard(client: Any, config: str | Path | None = None, **policy: Any) -> GuardedClient:
    """Wrap an `openai.OpenAI` or `openai.AsyncOpenAI` client."""
    from reflexguard.api.openai_client import GuardedClient

    return GuardedClient(client, settings_guard(config, **policy))


def guard_litellm(config: str | Path | None = None, **policy: Any) -> GuardedLiteLLM:
    """`completion` / `acompletion` with litellm's signature, guarded."""
    from reflexguard.api.litellm_calls import GuardedLiteLLM

    return GuardedLiteLLM(settings_guard(config, **policy))
