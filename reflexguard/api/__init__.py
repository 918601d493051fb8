"""reflexguard without a hop: the same guard, in the caller's process.

    guarded = reflexguard.guard(openai.OpenAI(...), max_repairs=2)
    guarded.chat.completions.create(...)          # validated and repaired
    guarded.responses.create(...)                 # the same, in the Responses format

    claude = reflexguard.guard(anthropic.Anthropic(...))
    claude.messages.create(...)                   # the same, in the Messages format

    llm = reflexguard.guard_litellm(max_repairs=2)
    llm.completion(model=..., messages=..., tools=...)

Keyword arguments are `Settings` fields (`docs/config.md`), over `REFLEXGUARD_*`
variables, over the defaults; a YAML file can be named with `config=`. The client
libraries are imported only when a guard is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from reflexguard.api.engine import Guard
from reflexguard.api.errors import ReflexguardError, RepairExhausted, UpstreamStreamCut
from reflexguard.ops.config import load_settings

if TYPE_CHECKING:
    import anthropic

    from reflexguard.api.anthropic_client import GuardedAnthropic
    from reflexguard.api.litellm_calls import GuardedLiteLLM
    from reflexguard.api.openai_client import GuardedClient

__all__ = ["ReflexguardError", "RepairExhausted", "UpstreamStreamCut", "guard",
           "guard_litellm", "settings_guard"]


def settings_guard(config: str | Path | None = None, **policy: Any) -> Guard:
    """A `Guard` from keyword arguments over `REFLEXGUARD_*` over the YAML file."""
    return Guard(load_settings(policy, Path(config) if config is not None else None))


@overload
def guard(client: anthropic.Anthropic | anthropic.AsyncAnthropic,
          config: str | Path | None = None, **policy: Any) -> GuardedAnthropic: ...


@overload
def guard(client: Any, config: str | Path | None = None, **policy: Any) -> GuardedClient: ...


def guard(client: Any, config: str | Path | None = None,
          **policy: Any) -> GuardedClient | GuardedAnthropic:
    """Wrap an `openai.OpenAI` / `openai.AsyncOpenAI` client, or an `anthropic.Anthropic` /
    `anthropic.AsyncAnthropic` one (each SDK is imported only for its own clients)."""
    if any(kind.__module__.split(".")[0] == "anthropic" for kind in type(client).__mro__):
        from reflexguard.api.anthropic_client import GuardedAnthropic

        return GuardedAnthropic(client, settings_guard(config, **policy))
    from reflexguard.api.openai_client import GuardedClient

    return GuardedClient(client, settings_guard(config, **policy))


def guard_litellm(config: str | Path | None = None, **policy: Any) -> GuardedLiteLLM:
    """`completion` / `acompletion` with litellm's signature, guarded."""
    from reflexguard.api.litellm_calls import GuardedLiteLLM

    return GuardedLiteLLM(settings_guard(config, **policy))
