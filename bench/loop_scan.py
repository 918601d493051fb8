"""`python -m bench.loop_scan`: how long the loop guard's history scan holds the event loop.

The scan (reflexguard/dialects/trajectory.py then reflexguard/core/loops.py) runs on the
event loop, synchronously, once per guarded request with `loop_guard` on. Issue 32 bounds
it: a 20,000-message history with 10,000 calls must not block the loop for more than 50 ms.
This builds such histories in every dialect, after a single user message (the worst case:
the scan reads everything since the user last spoke), in two shapes: one call repeated
with one result (the loop itself, where every step is the same) and 10,000 distinct calls
(every step new), then times the scan and the check of a proposed reply, the longest of
--rounds. The readers read at most MAX_SCANNED_CALLS calls back from the end (the bound
that makes the figure; the output says when it cut the reading). The figure is printed,
never asserted: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from reflexguard.core.loops import repeats_in, scan
from reflexguard.core.model import Reply, ToolCall
from reflexguard.dialects.trajectory import MAX_SCANNED_CALLS, steps_of

RESULT = "-rw-r--r-- 1 user staff 1024 Dec  2 10:00 example.txt  " * 2  # ~110 characters


def arguments(i: int, distinct: bool) -> dict[str, Any]:
    return {"file_name": f"file_{i}.txt" if distinct else "example.txt", "lines": 20}


def history(dialect: str, calls: int, distinct: bool) -> dict[str, Any]:
    """One user message, then `calls` calls each with its result: 2 * calls + 1 messages
    (chat, Messages) or items (Responses)."""
    if dialect == "chat":
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for i in range(calls):
            messages += [{"role": "assistant", "content": "", "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {
                    "name": "cat", "arguments": json.dumps(arguments(i, distinct))}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": RESULT}]
        return {"messages": messages}
    if dialect == "messages":
        messages = [{"role": "user", "content": "go"}]
        for i in range(calls):
            messages += [{"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{i}", "name": "cat",
                 "input": arguments(i, distinct)}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": f"t{i}", "content": RESULT}]}]
        return {"messages": messages}
    items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(calls):
        items += [{"type": "function_call", "call_id": f"c{i}", "name": "cat",
                   "arguments": json.dumps(arguments(i, distinct))},
                  {"type": "function_call_output", "call_id": f"c{i}", "output": RESULT}]
    return {"input": items}


def timed(body: dict[str, Any], dialect: str, rounds: int) -> tuple[float, int, bool]:
    proposed = Reply(tool_calls=(ToolCall(id="p", name="cat",
                                          arguments=json.dumps(arguments(0, False))),))
    worst, found, cut = 0.0, 0, False
    for _ in range(rounds):
        began = time.perf_counter()
        steps, cut = steps_of(body, dialect)
        found = len(repeats_in(proposed, scan(steps, 2)))
        worst = max(worst, time.perf_counter() - began)
    return worst, found, cut


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.loop_scan", description=__doc__)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"loop scan, {args.calls:,} calls ({2 * args.calls + 1:,} messages), "
          f"longest of {args.rounds} rounds (bound: 50 ms)")
    for dialect in ("chat", "messages", "responses"):
        for distinct in (False, True):
            seconds, found, cut = timed(history(dialect, args.calls, distinct), dialect,
                                        args.rounds)
            shape = "distinct calls" if distinct else "one call repeated"
            print(f"  {dialect:<9} {shape:<18} {seconds * 1000:7.1f} ms  "
                  f"(proposed call repeats: {bool(found)}; read only the last "
                  f"{MAX_SCANNED_CALLS:,} calls: {cut})")


if __name__ == "__main__":
    main()
