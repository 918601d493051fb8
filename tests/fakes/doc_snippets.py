"""The fenced examples of a doc page, and a fake model that gets them wrong once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.fakes.native_replies import anthropic_call, function_call, openai_response

DOCS = Path(__file__).resolve().parents[2] / "docs"
# The address the examples use for the model server, replaced by the fake's.
EXAMPLE_UPSTREAM = "http://127.0.0.1:8000/v1"
# The same server as the anthropic SDK names it (the SDK adds /v1 itself).
EXAMPLE_HOST = "http://127.0.0.1:8000"
GOOD_CANCEL = {"order_id": "#W123", "reason": "ordered by mistake"}


def fenced(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text()
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def wrong_once(body: dict[str, Any]) -> Scripted:
    """A call missing `reason` at first; the right call once it has been told (a re-ask).
    Answers in the request's own format: Chat Completions, Messages or Responses."""
    if "input" in body:  # Responses: told by a function_call_output item
        told = any(isinstance(i, dict) and i.get("type") == "function_call_output"
                   for i in body["input"])
        arguments = GOOD_CANCEL if told else {"order_id": "#W123"}
        return Scripted(completion=openai_response(function_call("cancel_pending_order",
                                                                 arguments)))
    if any("input_schema" in t for t in body.get("tools", [])):  # Messages: a tool_result
        told = any(isinstance(b, dict) and b.get("type") == "tool_result"
                   for m in body["messages"] if isinstance(m.get("content"), list)
                   for b in m["content"])
        arguments = GOOD_CANCEL if told else {"order_id": "#W123"}
        return Scripted(completion=anthropic_call("cancel_pending_order", arguments))
    told = any(m.get("role") == "tool" for m in body.get("messages", []))
    arguments = GOOD_CANCEL if told else {"order_id": "#W123"}
    return Scripted(completion=tool_call_completion("cancel_pending_order", arguments))
