"""`python -m bench.perf.hotpath`: the guarded fast path's CPU, piece by piece, no sockets.

What one valid, non-streamed chat request costs reflexguard besides its HTTP: reading the
request, reading the upstream's answer, checking its calls (the clean-answer shortcut;
with `--margins`, the ladder's full reading into replies and verdicts), and the
telemetry of a clean attempt. Each piece is timed as the fastest of
several batches (the machine is shared: the minimum is the least disturbed), and
`--profile` prints cProfile's view of the whole sequence. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench.perf.fast_upstream import ANSWER_BYTES, answer_with_logprobs
from bench.perf.workload import TOOL_WORKLOADS
from reflexguard.core.attempts import read_attempt
from reflexguard.core.limits import DEFAULT_MAX_JSON_DEPTH
from reflexguard.core.margins import completion_margins
from reflexguard.core.toolset import ToolSetCache
from reflexguard.core.validate import clean_tool_calls
from reflexguard.dialects.chat_request import CHAT
from reflexguard.dialects.reader import read_request
from reflexguard.http.margins import without_logprobs
from reflexguard.http.upstream import parse_completion
from reflexguard.ops.config import Settings
from reflexguard.ops.policy import grounding_policy, guard_policy
from reflexguard.ops.telemetry import Telemetry, configure_logging


def fastest_us(work: Callable[[], Any], batch: int, batches: int) -> float:
    best = float("inf")
    for _ in range(batches):
        began = time.perf_counter()
        for _ in range(batch):
            work()
        best = min(best, (time.perf_counter() - began) / batch)
    return best * 1e6


def pieces(tools: str, margins: bool) -> dict[str, Callable[[], Any]]:
    configure_logging("info")
    settings = Settings(upstream="http://127.0.0.1:9/v1")
    raw = TOOL_WORKLOADS[tools][1]
    cache, grounding, policy = ToolSetCache(), grounding_policy(settings), guard_policy(settings)
    telemetry = Telemetry()
    chat = read_request(raw, CHAT, cache, grounding, settings.max_json_depth)
    assert chat.rules is not None
    rules = chat.rules
    answer = answer_with_logprobs(5) if margins else ANSWER_BYTES
    completion = parse_completion(answer, DEFAULT_MAX_JSON_DEPTH)
    attempt = read_attempt(1, "initial", completion, rules, policy.lift_text_calls, 0.001)
    assert attempt.verdict.valid, attempt.verdict

    def telemetry_clean() -> None:
        margin = completion_margins(completion) if margins else ()
        telemetry.attempt(attempt, "rg-x", None, chat.model, rules.toolset.digest, False,
                          "chat", margins=margin)
        telemetry.outcome("clean", [], "rg-x", None, "chat")
        telemetry.added_seconds.observe(0.0001)

    def telemetry_shortcut() -> None:
        telemetry.clean_answer(("get_order_details",), "rg-x", None, chat.model,
                               rules.toolset.digest, False, "chat", 0.001, None)
        telemetry.added_seconds.observe(0.0001)

    work: dict[str, Callable[[], Any]] = {
        "read_request": lambda: read_request(raw, CHAT, cache, grounding, settings.max_json_depth),
        "parse_completion": lambda: parse_completion(answer, DEFAULT_MAX_JSON_DEPTH),
    }
    if margins:  # margins need the ladder's reading: no clean-answer shortcut
        work["read_attempt"] = lambda: read_attempt(1, "initial", completion, rules,
                                                    policy.lift_text_calls, 0.001)
        work["telemetry (clean)"] = telemetry_clean
        work["strip logprobs"] = lambda: orjson.dumps(without_logprobs(completion))
    else:  # call.py's path for an all-ok first answer
        assert clean_tool_calls(completion, rules) is not None
        work["clean_tool_calls"] = lambda: clean_tool_calls(completion, rules)
        work["telemetry (shortcut)"] = telemetry_shortcut
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", choices=sorted(TOOL_WORKLOADS), default="8")
    parser.add_argument("--margins", action="store_true", help="the answer carries logprobs")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--profile", action="store_true", help="cProfile the whole sequence")
    args = parser.parse_args()
    work = pieces(args.tools, args.margins)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.batch * 4):
            for piece in work.values():
                piece()
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())
    total = 0.0
    print(f"{args.tools} tools{', margins on' if args.margins else ''}: one valid request's "
          f"pieces, fastest of {args.batches} batches of {args.batch} (us)")
    for name, piece in work.items():
        us = fastest_us(piece, args.batch, args.batches)
        total += us
        print(f"  {name:<20} {us:8.1f}")
    print(f"  {'total':<20} {total:8.1f}")


if __name__ == "__main__":
    main()
