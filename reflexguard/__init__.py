"""reflexguard: a validating, repairing OpenAI-compatible proxy for LLM tool calls, and the
same guard in-process (`reflexguard.guard`)."""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from pathlib import Path

    import anthropic

    from reflexguard.api.anthropic_client import GuardedAnthropic
    from reflexguard.api.litellm_calls import GuardedLiteLLM
    from reflexguard.api.openai_client import GuardedClient


@overload
def guard(client: anthropic.Anthropic | anthropic.AsyncAnthropic,
          config: str | Path | None = None, **policy: Any) -> GuardedAnthropic: ...


@overload
def guard(client: Any, config: str | Path | None = None, **policy: Any) -> GuardedClient: ...


def guard(client: Any, config: str | Path | None = None,
          **policy: Any) -> GuardedClient | GuardedAnthropic:
    """Wrap an `openai.OpenAI` / `openai.AsyncOpenAI` client (chat completions and
    responses) or an `anthropic.Anthropic` / `anthropic.AsyncAnthropic` one (messages)
    (`docs/python.md`). Imports nothing heavy until called."""
    from reflexguard.api import guard as build

    guarded: GuardedClient | GuardedAnthropic = build(client, config, **policy)
    return guarded


def guard_litellm(config: str | Path | None = None, **policy: Any) -> GuardedLiteLLM:
    """`completion` / `acompletion` with litellm's signature, guarded (`docs/python.md`)."""
    from reflexguard.api import guard_litellm as build

    return build(config, **policy)
