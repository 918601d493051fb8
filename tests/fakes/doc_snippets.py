"""The fenced examples of a doc page, and a fake model that gets them wrong once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.fakes.fake_upstream import Scripted, tool_call_completion

DOCS = Path(__file__).resolve().parents[2] / "docs"
# The address the examples use for the model server, replaced by the fake's.
EXAMPLE_UPSTREAM = "http://127.0.0.1:8000/v1"
GOOD_CANCEL = {"order_id": "#W123", "reason": "ordered by mistake"}


def fenced(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text()
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def wrong_once(body: dict[str, Any]) -> Scripted:
    """A call missing `reason` at first; the right call once it has been told (a re-ask)."""
    told = any(m.get("role") == "tool" for m in body.get("messages", []))
    arguments = GOOD_CANCEL if told else {"order_id": "#W123"}
    return Scripted(completion=tool_call_completion("cancel_pending_order", arguments))
