"""Typed views of the parts of an OpenAI chat exchange that reflexguard reasons about.

Nothing here does I/O. Requests and responses stay plain dicts on the wire so that
unknown fields pass through untouched; these models hold only what validation and
repair read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reflexguard.core.channels import Channel

JsonObject = dict[str, Any]


def as_object(value: object) -> JsonObject:
    """`value` if it is a JSON object, else an empty one: model output is untrusted."""
    return value if isinstance(value, dict) else {}


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str


class Reply(BaseModel):
    """One choice's assistant message, reduced to what a guard checks."""

    model_config = ConfigDict(frozen=True)

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None

    @property
    def is_empty(self) -> bool:
        return not self.tool_calls and not (self.content or "").strip()


class CallVerdict(BaseModel):
    """The channel of one tool call, or of the whole reply when it has no call."""

    model_config = ConfigDict(frozen=True)

    channel: Channel
    index: int | None = Field(default=None, description="position in tool_calls, if any")
    name: str | None = None
    detail: str = ""
    # An internal event while classifying (the validator itself failed): counted as a
    # fallback, never blamed on the model.
    note: str | None = None


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    calls: tuple[CallVerdict, ...] = ()
    notes: tuple[str, ...] = ()  # reply-level internal events, e.g. a capped text scan

    @property
    def internal_events(self) -> tuple[str, ...]:
        return self.notes + tuple(c.note for c in self.calls if c.note)

    @property
    def valid(self) -> bool:
        return all(c.channel is Channel.OK for c in self.calls)

    @property
    def violations(self) -> tuple[CallVerdict, ...]:
        return tuple(c for c in self.calls if c.channel is not Channel.OK)


ToolChoiceMode = Literal["auto", "none", "required", "named"]


class ToolChoice(BaseModel):
    model_config = ConfigDict(frozen=True)

    mode: ToolChoiceMode = "auto"
    name: str | None = None

    @classmethod
    def parse(cls, raw: object) -> ToolChoice:
        """Read the request's tool_choice; anything unrecognised behaves as 'auto'."""
        if isinstance(raw, dict):
            function = raw.get("function")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                return cls(mode="named", name=function["name"])
        # Frozen, so the three plain modes are shared rather than built per request.
        return _PLAIN_CHOICES[raw if raw in ("none", "required") else "auto"]


_PLAIN_CHOICES = {mode: ToolChoice(mode=mode) for mode in ("auto", "none", "required")}
