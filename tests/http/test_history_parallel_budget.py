"""The error budget across one reply's parallel calls, through the proxy (issue 22): with two
units left, a reply of one valid and three invalid calls reaches the agent with its valid
call and one invalid one; without a budget, as the model sent it. Fake upstream on loopback.
"""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, completion_with_message

VALID = '{"order_id": "#W1234567", "detail": "full"}'
INVALID = '{"order_id": "#W1234567"}'  # `detail` is required


def parallel(*arguments: str) -> Scripted:
    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": "get_order_details", "arguments": a}}
             for i, a in enumerate(arguments)]
    return Scripted(completion_with_message({"role": "assistant", "content": None,
                                             "tool_calls": calls}, "tool_calls"))


async def answer(client: Any, **headers: str) -> tuple[list[str], Any]:
    response = await client.post("/v1/chat/completions", json=chat_body(), headers=headers)
    assert response.status == 200, await response.text()
    body = await response.json()
    calls = body["choices"][0]["message"].get("tool_calls") or []
    return [c["function"]["arguments"] for c in calls], response.headers


async def test_invalid_parallel_calls_beyond_the_budget_are_withheld(fake, proxy) -> None:
    upstream, _ = fake
    upstream.default = parallel(INVALID, VALID, INVALID, INVALID)  # every attempt alike
    client = await proxy()
    calls, headers = await answer(client, **{"x-reflexguard-error-budget": "2"})
    assert calls == [INVALID, VALID]
    assert headers["x-reflexguard-budget-remaining"] == "2"
    metrics = await (await client.get("/metrics")).text()
    assert ('reflexguard_fallbacks_total{kind="invalid_calls_over_budget_withheld"} 1.0'
            in metrics)


async def test_without_a_budget_the_reply_goes_out_as_it_came(fake, proxy) -> None:
    upstream, _ = fake
    upstream.default = parallel(INVALID, VALID, INVALID, INVALID)
    client = await proxy()
    calls, _ = await answer(client)
    assert calls == [INVALID, VALID, INVALID, INVALID]


async def test_streamed_the_same_rule_holds(fake, proxy) -> None:
    upstream, _ = fake
    upstream.default = parallel(INVALID, VALID, INVALID, INVALID)
    client = await proxy()
    response = await client.post("/v1/chat/completions", json=chat_body(stream=True),
                                 headers={"x-reflexguard-error-budget": "2"})
    assert response.status == 200
    arguments: dict[int, str] = {}
    for line in (await response.text()).splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:]).get("choices", []):
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                piece = (call.get("function") or {}).get("arguments") or ""
                arguments[call["index"]] = arguments.get(call["index"], "") + piece
    assert [arguments[i] for i in sorted(arguments)] == [INVALID, VALID]
