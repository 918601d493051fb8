"""What the GenAI spans say about one request and its answer, read from the wire JSON.

Nothing here does I/O: pure functions over the request bytes and the core's completion
view, plus the two opt-in switches read from the environment (reflexguard.ops.otel).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import orjson

from reflexguard.core.limits import clip

CONTENT_LIMIT = 16_384  # an opted-in content attribute, clipped: exporters cap spans too
# An upstream's model name and response id, clipped: they ride in every queued span, and
# a hostile or broken upstream can send 100 KB of either (issue 30).
ATTRIBUTE_LIMIT = 256


def capture_content() -> bool:
    """The GenAI instrumentations' opt-in for contents, read once per process."""
    value = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return value.strip().lower() in ("true", "1", "span_only", "span_and_event")


def latest_only() -> bool:
    """OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: the newest names only;
    without it the deprecated `gen_ai.system` is sent beside `gen_ai.provider.name`."""
    values = os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "")
    return "gen_ai_latest_experimental" in {v.strip() for v in values.split(",")}


def provider_of(call: Any) -> str:
    """The wire format's provider flavour: an Anthropic Messages upstream, else OpenAI's
    (the Python API's native dialects talk to their own SDK's service: native)."""
    if dialect_of(call) == "messages" and getattr(call, "native", True):
        return "anthropic"
    return "openai"


def dialect_of(call: Any) -> str:
    """The proxy's call names its dialect in `dialect`; the Python API's in `dialect_name`."""
    name = getattr(call, "dialect", "chat")
    return name if isinstance(name, str) else str(getattr(call, "dialect_name", "chat"))


def _json(value: Any) -> str:
    try:
        return clip(orjson.dumps(value).decode(), CONTENT_LIMIT)
    except (TypeError, RecursionError):
        return "<not encodable>"


def response_attributes(completion: Mapping[str, Any]) -> dict[str, Any]:
    """gen_ai.response.* and usage from a chat completion (the core's view of every
    dialect's reply; a native reply's own usage when the view has none)."""
    attributes: dict[str, Any] = {}
    native = completion.get("reflexguard_native")
    source = native if isinstance(native, dict) else completion
    for key, name in (("model", "gen_ai.response.model"), ("id", "gen_ai.response.id")):
        value = completion.get(key) or source.get(key)
        if isinstance(value, str):
            attributes[name] = clip(value, ATTRIBUTE_LIMIT)
    # The provider's own word where its reply has one (Messages' stop_reason: tool_use),
    # else the chat view's finish_reason per choice.
    reasons = [clip(source["stop_reason"], ATTRIBUTE_LIMIT)] \
        if isinstance(source.get("stop_reason"), str) else [
        clip(str(c.get("finish_reason")), ATTRIBUTE_LIMIT) for c in completion.get("choices") or []
        if isinstance(c, dict) and c.get("finish_reason") is not None]
    if reasons:
        attributes["gen_ai.response.finish_reasons"] = reasons
    for usage in (completion.get("usage"), source.get("usage")):
        if not isinstance(usage, dict):
            continue
        for keys, name in ((("prompt_tokens", "input_tokens"), "gen_ai.usage.input_tokens"),
                           (("completion_tokens", "output_tokens"),
                            "gen_ai.usage.output_tokens")):
            for key in keys:
                if isinstance(usage.get(key), int) and name not in attributes:
                    attributes[name] = usage[key]
    return attributes


def request_content(body: bytes) -> dict[str, Any]:
    """The opted-in request contents: messages (or Responses input) and tool definitions."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(value, dict):
        return {}
    attributes: dict[str, Any] = {}
    messages = value.get("messages", value.get("input"))
    if messages is not None:
        attributes["gen_ai.input.messages"] = _json(messages)
    if value.get("system") is not None:
        attributes["gen_ai.system_instructions"] = _json(value["system"])
    if value.get("tools") is not None:
        attributes["gen_ai.tool.definitions"] = _json(value["tools"])
    return attributes


def output_content(completion: Mapping[str, Any]) -> dict[str, Any]:
    choices = completion.get("choices") or []
    messages = [c.get("message") for c in choices if isinstance(c, dict)]
    return {"gen_ai.output.messages": _json(messages)}

