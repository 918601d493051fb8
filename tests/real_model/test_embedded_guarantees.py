"""The pipeline's guarantees on a real quantized model (no model-quality thresholds).

For each variant the 34 fixed prompts go through reflexguard in front of the embedded
llama.cpp server, with a tap recording the raw upstream answers:
- every answer is a valid call, or its repair bound was exhausted;
- the channels reflexguard counted equal an independent re-validation of the raw answers;
- the caller's messages are untouched, and every upstream request starts with them;
- observe mode returns the upstream's answer unchanged (save the declared format lift).

The lower variant's runs share a memo (tests/real_model/memo.py): observe mode sends each
prompt as the repair run's first attempt did, and gets the model's own answer to it again
rather than a second decode of the same body at temperature 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from bench.figures.embedded_run import PromptResult, RunResult, run_prompts
from reflexguard.core.completion import choices_of, lift_text_calls, reply_of
from reflexguard.core.model import ToolChoice
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import CallRules, validate_reply
from reflexguard.embedded.child import ModelServer
from tests.real_model.memo import Memo

pytestmark = pytest.mark.real_model
MAX_REPAIRS = 2


def independent_channels(result: PromptResult) -> Counter[str]:
    cache = ToolSetCache()
    counted: Counter[str] = Counter()
    for exchange in result.exchanges:
        body = exchange.request
        rules = CallRules(toolset=cache.get(body["tools"]),
                          tool_choice=ToolChoice.parse(body.get("tool_choice")),
                          parallel_tool_calls=body.get("parallel_tool_calls") is not False)
        for choice in choices_of(orjson.loads(exchange.answer)):
            for verdict in validate_reply(lift_text_calls(reply_of(choice)), rules).calls:
                counted[str(verdict.channel)] += 1
    return counted


def counted_channels(run: RunResult, prompt_id: str) -> Counter[str]:
    counted: Counter[str] = Counter()
    for event in run.events:
        if event.get("session") == prompt_id and event["event"] == "attempt" \
                and event["kind"] != "fix":
            counted.update(call["channel"] for call in event["calls"])
    return counted


def final_is_valid(result: PromptResult) -> bool:
    cache = ToolSetCache()
    rules = CallRules(toolset=cache.get(result.sent["tools"]))
    return validate_reply(reply_of(choices_of(result.answer)[0]), rules).valid


def check_repair_run(run: RunResult) -> None:
    assert len(run.results) == 34
    for result in run.results:
        assert result.status == 200, result.answer
        assert result.attempts == len(result.exchanges)
        assert 1 <= result.attempts <= MAX_REPAIRS + 1
        assert final_is_valid(result) or result.attempts == MAX_REPAIRS + 1, result.prompt_id
        assert counted_channels(run, result.prompt_id) == independent_channels(result)
        assert result.sent == result.sent_snapshot
        for exchange in result.exchanges:
            sent_messages = result.sent["messages"]
            assert exchange.request["messages"][: len(sent_messages)] == sent_messages


@pytest.fixture(scope="module")
def lower_answers(lower_server: ModelServer) -> Memo:
    """The lower variant's answers, kept for this module's runs."""
    return Memo(lower_server.base_url)


@pytest.fixture
async def lower_url(lower_answers: Memo) -> AsyncIterator[str]:
    server = await lower_answers.serve()
    yield str(server.make_url("/v1"))
    await server.close()


async def repair_run(model_url: str, tmp_path: Path) -> RunResult:
    return await run_prompts(model_url, tmp_path / "events.jsonl",
                             max_repairs=MAX_REPAIRS, constrained_retry="response_format")


async def test_repair_guarantees_at_q4_k_m(q4_server: ModelServer, tmp_path: Path) -> None:
    check_repair_run(await repair_run(q4_server.base_url, tmp_path))


async def test_repair_guarantees_at_lower_variant(lower_url: str, tmp_path: Path) -> None:
    check_repair_run(await repair_run(lower_url, tmp_path))


async def test_observe_mode_changes_nothing(lower_url: str, lower_answers: Memo,
                                            tmp_path: Path) -> None:
    run = await run_prompts(lower_url, tmp_path / "events.jsonl", repair=False)
    # Each prompt once, decoded now or answered as the repair run's first attempt was.
    assert lower_answers.decoded + lower_answers.replayed == len(run.results) == 34
    print(f"observe mode: {lower_answers.replayed} of 34 answers from the repair run")
    for result in run.results:
        assert result.attempts == 1 and len(result.exchanges) == 1
        raw = orjson.loads(result.exchanges[0].answer)
        lifted = lift_text_calls(reply_of(choices_of(raw)[0]))
        returned = reply_of(choices_of(result.answer)[0])
        assert (returned.content, [(c.name, c.arguments) for c in returned.tool_calls]) == (
            lifted.content, [(c.name, c.arguments) for c in lifted.tool_calls])
        rest = {k: v for k, v in result.answer.items() if k != "choices"}
        assert rest == {k: v for k, v in raw.items() if k != "choices"}
        assert counted_channels(run, result.prompt_id) == independent_channels(result)
        assert result.sent == result.sent_snapshot
