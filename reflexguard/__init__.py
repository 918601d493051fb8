"""reflexguard: a validating, repairing OpenAI-compatible proxy for LLM tool calls, and the
same guard in-process (`reflexguard.guard`)."""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from reflexguard.api.litellm_calls import GuardedLiteLLM
    from reflexguard.api.openai_client import GuardedClient


def guard(client: Any, config: str | Path | None = None, **policy: Any) -> GuardedClient:
    """Wrap an `openai.OpenAI` / `openai.AsyncOpenAI` client (`docs/python.md`). Imports
    nothing heavy until called."""
    from reflexguard.api import guard as build

    return build(client, config, **policy)


def guard_litellm(config: str | Path | None = None, **policy: Any) -> GuardedLiteLLM:
    """`completion` / `acompletion` with litellm's signature, guarded (`docs/python.md`)."""
    from reflexguard.api import guard_litellm as build

    return build(config, **policy)
