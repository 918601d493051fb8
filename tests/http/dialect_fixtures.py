"""Tools and bodies shared by the Messages and Responses end-to-end tests."""

from __future__ import annotations

import copy
from typing import Any

from tests.conftest import TOOLS

GOOD = {"order_id": "#W1234567", "detail": "full"}
SYSTEM = "You are a retail agent."
ASK = "Show me order #W1234567 in full."


def anthropic_tools() -> list[dict[str, Any]]:
    return [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "input_schema": copy.deepcopy(t["function"]["parameters"])} for t in TOOLS]


def responses_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "name": t["function"]["name"],
             "description": t["function"].get("description", ""),
             "parameters": copy.deepcopy(t["function"]["parameters"]), "strict": False}
            for t in TOOLS]


def messages_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "max_tokens": 256, "system": SYSTEM,
                            "messages": [{"role": "user", "content": ASK}],
                            "tools": anthropic_tools()}
    body.update(extra)
    return body


def responses_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "instructions": SYSTEM, "input": ASK,
                            "tools": responses_tools()}
    body.update(extra)
    return body
