"""One-off: the pure cost of `--margins on` per answer, as a ratio to parsing that answer.

    PYTHONPATH=. .venv/bin/python scripts/margin_cost.py

The end-to-end overhead of the option is bench.overhead's to measure (docs/performance.md).
"""

from __future__ import annotations

import json
import timeit
from pathlib import Path
from typing import Any

import orjson

from reflexguard.core.margins import completion_margins
from reflexguard.http.margins import without_logprobs
from tests.fakes.vllm_logprobs import native_two_calls

FIXTURE = Path(__file__).resolve().parents[1] / "tests/core/fixtures/qwen05b_q4km_logprobs.json"
RUNS = 2000


def best(function: Any) -> float:
    return min(timeit.repeat(function, number=RUNS, repeat=5)) / RUNS


def main() -> None:
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))["completions"]["call"]
    for name, completion in (("recorded content call", recorded),
                             ("vLLM-shaped two native calls", native_two_calls())):
        raw = orjson.dumps(completion)
        tokens = len(completion["choices"][0]["logprobs"]["content"])
        parse = best(lambda raw=raw: orjson.loads(raw))
        margins = best(lambda c=completion: completion_margins(c))
        strip = best(lambda c=completion: orjson.dumps(without_logprobs(c)))
        print(f"{name} ({tokens} tokens, {len(raw)} B): orjson.loads {parse * 1e6:.1f} us "
              f"(baseline); completion_margins {margins * 1e6:.1f} us = {margins / parse:.1f}x; "
              f"strip + re-encode {strip * 1e6:.1f} us = {strip / parse:.2f}x")


if __name__ == "__main__":
    main()
