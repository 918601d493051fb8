"""The guarded routes, for the fault-injection tests: what to script upstream, what to
send, and the calls the agent read back (from JSON or from the stream's events)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.native_replies import anthropic_call, function_call, openai_response
from tests.http.dialect_fixtures import GOOD, messages_body, responses_body

PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
         "responses": "/v1/responses"}
# Ids that a translated answer draws afresh per answer (uuid4 hex): the same either way.
FRESH_IDS = re.compile(rb"(msg|toolu|resp|fc|rs|call|item|chatcmpl)_[0-9a-f]{12,}")


@dataclass(frozen=True)
class Route:
    dialect: str
    native: bool
    stream: bool

    @property
    def name(self) -> str:
        how = "native" if self.native else "translated"
        return f"{self.dialect}-{how}-{'stream' if self.stream else 'json'}"

    def settings(self) -> dict[str, Any]:
        return {} if self.native else {"upstream_dialects": ["chat"]}

    def answer(self, name: str = "get_order_details", arguments: Any = None) -> Scripted:
        arguments = GOOD if arguments is None else arguments
        if self.dialect == "messages" and self.native:
            return Scripted(anthropic_call(name, arguments))
        if self.dialect == "responses" and self.native:
            return Scripted(openai_response(function_call(name, arguments)))
        return Scripted(tool_call_completion(name, arguments))

    def body(self, **extra: Any) -> dict[str, Any]:
        maker = {"chat": chat_body, "messages": messages_body,
                 "responses": responses_body}[self.dialect]
        return maker(**({"stream": True} if self.stream else {}), **extra)


ROUTES = [Route("chat", True, s) for s in (False, True)] + [
    Route(d, n, s) for d in ("messages", "responses") for n in (True, False)
    for s in (False, True)]


def _events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for line in raw.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            out.append(json.loads(line[5:]))
    return out


def agent_calls(route: Route, raw: bytes) -> list[tuple[str, str]]:
    """(name, arguments as text) of every call the agent received."""
    if not route.stream:
        answer = json.loads(raw)
        if route.dialect == "chat":
            calls = answer["choices"][0]["message"].get("tool_calls") or []
            return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
        if route.dialect == "messages":
            return [(b["name"], json.dumps(b["input"])) for b in answer["content"]
                    if b["type"] == "tool_use"]
        return [(i["name"], i["arguments"]) for i in answer["output"]
                if i["type"] == "function_call"]
    events = _events(raw)
    if route.dialect == "chat":
        calls: dict[int, list[str]] = {}
        for event in events:
            for delta in (event.get("choices") or [{}])[0].get("delta", {}).get(
                    "tool_calls") or []:
                entry = calls.setdefault(delta["index"], ["", ""])
                entry[0] += delta.get("function", {}).get("name") or ""
                entry[1] += delta.get("function", {}).get("arguments") or ""
        return [(n, a) for n, a in calls.values()]
    if route.dialect == "messages":
        blocks: dict[int, list[str]] = {}
        for event in events:
            if event["type"] == "content_block_start" and \
                    event["content_block"]["type"] == "tool_use":
                blocks[event["index"]] = [event["content_block"]["name"], ""]
            if event["type"] == "content_block_delta" and \
                    event["delta"]["type"] == "input_json_delta":
                blocks[event["index"]][1] += event["delta"]["partial_json"]
        return [(n, a) for n, a in blocks.values()]
    done = [e for e in events if e["type"] == "response.completed"][-1]
    return [(i["name"], i["arguments"]) for i in done["response"]["output"]
            if i["type"] == "function_call"]
