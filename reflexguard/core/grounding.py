"""The `ungrounded_entity` check: identifier-like arguments must come from the conversation.

Nothing here does I/O. A value is grounded when it appears in a user message or a tool
result (and, if configured, the system prompt). Tool descriptions and schema examples
are never a source: a small model that copies `#W0000000` from an example has invented
an identifier, not read one. When the value appears in the tool schemas, the system
prompt cannot ground it either, because prompts often repeat those examples.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_PATTERN = r"(?i)(^|_)(id|ids|number|numbers|email|emails)$"
MIN_VALUE_LENGTH = 3


@dataclass(frozen=True)
class GroundingSources:
    conversation: str  # user messages and tool results, casefolded
    system: str  # the system prompt, casefolded ("" when it does not count)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") for part in content if isinstance(part, dict)
            and isinstance(part.get("text"), str)
        )
    return ""


def collect_sources(messages: Sequence[Any], include_system: bool,
                    failed_result: re.Pattern[str] | None = None) -> GroundingSources:
    """`failed_result`: tool results it matches (a failed call's report, tau2's "Error:
    ...") ground nothing: an environment that answers "User 1234567890 not found" echoes
    the identifier the agent invented, and would otherwise make it grounded."""
    conversation: list[str] = []
    system: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("tool", "function"):
            text = _text_of(message.get("content"))
            if failed_result is None or not failed_result.search(text):
                conversation.append(text)
        elif role == "user":
            conversation.append(_text_of(message.get("content")))
        elif role in ("system", "developer") and include_system:
            system.append(_text_of(message.get("content")))
    return GroundingSources("\n".join(conversation).casefold(), "\n".join(system).casefold())


def _identifier_values(arguments: Any, pattern: re.Pattern[str]) -> Iterator[tuple[str, str]]:
    if isinstance(arguments, dict):
        for key, value in arguments.items():
            if isinstance(key, str) and pattern.search(key):
                yield from ((key, v) for v in _scalars(value))
            elif isinstance(value, dict | list):
                yield from _identifier_values(value, pattern)
    elif isinstance(arguments, list):
        for item in arguments:
            yield from _identifier_values(item, pattern)


def _scalars(value: Any) -> Iterator[str]:
    if isinstance(value, bool):
        return
    if isinstance(value, str | int):
        yield str(value)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, str | int) and not isinstance(item, bool):
                yield str(item)


def ungrounded_values(
    arguments: Any, sources: GroundingSources, schema_text: str, pattern: re.Pattern[str]
) -> list[tuple[str, str]]:
    """The (argument name, value) pairs that no allowed source contains."""
    missing: list[tuple[str, str]] = []
    for key, value in _identifier_values(arguments, pattern):
        needle = value.strip().casefold()
        if len(needle) < MIN_VALUE_LENGTH or needle in sources.conversation:
            continue
        if sources.system and needle in sources.system and needle not in schema_text:
            continue
        missing.append((key, value))
    return missing
