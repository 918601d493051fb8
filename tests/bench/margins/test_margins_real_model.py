"""The study's model layer on the real embedded Q4_K_M (a few decisions, no proxy)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from bench.margins.classify import classify, margins_of
from bench.margins.decisions import select_tasks, task_decisions
from bench.margins.model import Model
from bench.margins.runner import THREADS
from reflexguard.embedded import model_store

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    loaded = Model(model_store.ensure("Q4_K_M"), n_ctx=2048, threads=THREADS)
    yield loaded
    loaded.close()


def test_recorded_greedy_text_equals_plain_greedy_decoding(model: Model) -> None:
    decision = task_decisions("mock", select_tasks("mock", 1)[0]).decisions[0]
    tokens = model.prompt_tokens(decision.messages, decision.tools, decision.tool_choice)
    recorded = model.generate(tokens, max_tokens=48)
    plain = model.llm.create_completion(tokens, max_tokens=recorded.completion_tokens,
                                        temperature=0.0, repeat_penalty=1.0)
    assert plain["choices"][0]["text"] == recorded.text  # type: ignore[index]
    entries = recorded.completion["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == recorded.text
    for entry in entries:  # greedy: the chosen token is the top-1, and top-5 are sorted
        tops = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(tops) == 5 and tops == sorted(tops, reverse=True)
        assert entry["logprob"] == pytest.approx(tops[0])
        assert all(t <= 0 for t in tops) and sum(math.exp(t) for t in tops) <= 1 + 1e-6
    name, channel = classify(recorded.completion, decision.tools, decision.tool_choice)
    name_margin, call_margin = margins_of(recorded.completion)
    assert call_margin is not None and call_margin >= 0
    if name is not None and channel == "ok":
        assert name_margin is not None and name_margin >= 0


def test_the_next_decision_reuses_the_cached_prefix(model: Model) -> None:
    decision = task_decisions("mock", select_tasks("mock", 1)[0]).decisions[0]
    tokens = model.prompt_tokens(decision.messages, decision.tools, decision.tool_choice)
    model.generate(tokens, max_tokens=4)
    again = model.generate(tokens, max_tokens=4)
    assert again.reused_tokens == len(tokens)
