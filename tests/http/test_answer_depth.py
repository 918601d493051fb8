"""An upstream answer nested deeper than `max_json_depth` passes unguarded, wherever the
depth is: also inside `logprobs`, the part of an answer with the most containers, which
the faster depth walk (docs/performance.md) must still see whole."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import chat_body
from tests.fakes.fake_upstream import Scripted, tool_call_completion
from tests.http.test_hardening import metric, metrics_of, nested

LIMIT = 10
# The answer's own levels down to an entry's `bytes`: the object, choices, the choice,
# logprobs, content, the entry.
ABOVE_BYTES = 6


def answer_with_deep_logprobs(levels: int) -> dict[str, Any]:
    """An unknown tool's call (so a guarded answer is re-asked) whose logprobs nest
    `levels` deep in all, among many shallow entries."""
    answer = tool_call_completion("no_such_tool", "{}")
    entries: list[Any] = [{"token": "a", "logprob": -0.1, "bytes": [97]} for _ in range(50)]
    entries[31]["bytes"] = nested(levels - ABOVE_BYTES)
    answer["choices"][0]["logprobs"] = {"content": entries, "refusal": None}
    return answer


@pytest.mark.parametrize(("levels", "guarded"), [(LIMIT, True), (LIMIT + 1, False)])
async def test_depth_inside_logprobs_decides_whether_the_answer_is_guarded(
        fake: Any, proxy: Any, levels: int, guarded: bool) -> None:
    upstream, _ = fake
    answer = answer_with_deep_logprobs(levels)
    upstream.default = Scripted(answer)
    client = await proxy(max_json_depth=LIMIT, max_repairs=1)
    response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status == 200, await response.text()
    unguarded = metric(await metrics_of(client), "reflexguard_fallbacks_total",
                       kind="answer_too_deep_not_guarded")
    if guarded:
        assert upstream.calls > 1  # the unknown tool was re-asked
        assert unguarded == 0
    else:
        assert upstream.calls == 1
        assert await response.json() == answer  # passed on as it came
        assert unguarded == 1
