"""`--margins on` at the edge: ask the upstream for logprobs, hide them from an agent that
did not ask, and read each attempt's margins (reflexguard.core.margins; docs/screen.md).

The caller's body is never mutated: the upstream gets a copy with the two fields added.
An agent that asked for logprobs itself gets its request sent as it wrote it and its
logprobs back; margins are then computed from whatever arrives.
"""

from __future__ import annotations

from typing import Any

import orjson

from reflexguard.core.attempts import Attempt
from reflexguard.core.margins import MAX_TOKENS, CallMargin, completion_margins
from reflexguard.core.model import JsonObject
from reflexguard.ops.telemetry import Telemetry

TOP_LOGPROBS = 5  # vLLM returns logprobs only when `top_logprobs` is set as well


def agent_asked(body: JsonObject) -> bool:
    return bool(body.get("logprobs"))


def with_logprobs(body: JsonObject) -> JsonObject:
    return {**body, "logprobs": True, "top_logprobs": TOP_LOGPROBS}


def without_logprobs(completion: JsonObject) -> JsonObject:
    """A copy whose choices (or stream chunk choices) carry no `logprobs`."""
    choices = completion.get("choices")
    if not isinstance(choices, list):
        return completion
    return {**completion, "choices": [
        {k: v for k, v in c.items() if k != "logprobs"} if isinstance(c, dict) else c
        for c in choices]}


class RequestMargins:
    """One request's margin bookkeeping: what to ask, what to strip, what was measured."""

    def __init__(self, enabled: bool, body: JsonObject, telemetry: Telemetry,
                 request_id: str) -> None:
        self.enabled = enabled
        self.inject = enabled and not agent_asked(body)  # we asked, so we strip
        self.telemetry = telemetry
        self.request_id = request_id
        self._unavailable_counted = False
        self._streamed: list[Any] = []  # logprob entries read from a stream's chunks

    def body(self, body: JsonObject) -> JsonObject:
        return with_logprobs(body) if self.inject else body

    def outgoing(self, completion: JsonObject) -> JsonObject:
        return without_logprobs(completion) if self.inject else completion

    def of(self, attempt: Attempt) -> list[CallMargin]:
        """The attempt's margins; an upstream that sent none is counted once per request."""
        if not self.enabled or attempt.kind == "fix":  # a fix rewrites calls, not tokens
            return []
        margins = completion_margins(attempt.completion)
        if not margins and not self._unavailable_counted:
            self._unavailable_counted = True
            self.telemetry.fallback("margins_unavailable", request_id=self.request_id,
                                    attempt=attempt.number)
        return margins

    def collect(self, chunk: JsonObject) -> None:
        """Keep a stream chunk's first-choice logprob entries, to measure at the end."""
        if not self.enabled:
            return
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            logprobs = choice.get("logprobs")
            content = logprobs.get("content") if isinstance(logprobs, dict) else None
            if isinstance(content, list) and len(self._streamed) + len(content) <= MAX_TOKENS:
                self._streamed.extend(content)

    def passed_on(self, payload: bytes, chunk: JsonObject) -> bytes:
        """A passed-through chunk's bytes, without the logprobs we asked for."""
        choices = chunk.get("choices")
        if not self.inject or not isinstance(choices, list) or not any(
                isinstance(c, dict) and "logprobs" in c for c in choices):
            return payload
        return orjson.dumps(without_logprobs(chunk))

    def assembled(self, completion: JsonObject) -> JsonObject:
        """The assembled stream's completion with the collected logprobs on its choice."""
        choices = completion.get("choices")
        if not self._streamed or not isinstance(choices, list) or not choices:
            return completion
        first = {**choices[0], "logprobs": {"content": self._streamed}}
        return {**completion, "choices": [first, *choices[1:]]}
