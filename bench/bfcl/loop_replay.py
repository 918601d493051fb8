"""`python -m bench.bfcl.loop_replay OUT`: where the loop guard would have fired on the
multi-turn trajectories an arm already recorded, without running a model.

BFCL's result files keep each turn's steps (`inference_log`: every step's calls as BFCL
decoded them and every tool result). This replays them through the loop guard's own scan
(reflexguard/core/loops.py, as the proxy runs it at `loop_repeats`): before each step, the
steps so far in the turn are the history and the step's calls the proposed reply. It says,
per cell and arm, how many cases and turns hold a repeat, at which step the first one comes,
and how many steps of force-terminated turns (BFCL's 20-step limit) lie after it: the steps
a loop guard could save if its one re-ask broke the loop. It reads only files; the figures
are what the records say, not what a model would do after the note.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reflexguard.core.loops import DEFAULT_REPEATS, Step, canonical, normal_text, repeats_in, scan
from reflexguard.core.model import Reply, ToolCall

STEP_LIMIT = 20  # BFCL's steps per turn before it force-terminates


def _calls(message: Any) -> list[tuple[str, str]]:
    """A recorded assistant step's calls as (name, arguments): BFCL keeps a list of
    {name: arguments} dicts; text (the turn's end) has none."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [(name, args if isinstance(args, str) else json.dumps(args))
            for call in content if isinstance(call, dict) for name, args in call.items()]


def turn_steps(turn: dict[str, Any]) -> Iterator[tuple[list[tuple[str, str]], list[str]]]:
    """(the step's calls, their results in order) for each recorded step of one turn."""
    at = 0
    while f"step_{at}" in turn:
        messages = turn[f"step_{at}"]
        calls = next((_calls(m) for m in messages if isinstance(m, dict)
                      and m.get("role") == "assistant"), [])
        results = [str(m.get("content")) for m in messages
                   if isinstance(m, dict) and m.get("role") == "tool"]
        yield calls, results
        at += 1


def first_repeat(turn: dict[str, Any], repeats: int) -> tuple[int | None, int]:
    """(the first step whose calls repeat, or None; the turn's number of steps)."""
    history: list[Step] = []
    first = None
    count = 0
    for count, (calls, results) in enumerate(turn_steps(turn), start=1):
        proposed = Reply(tool_calls=tuple(ToolCall(id=str(i), name=n, arguments=a)
                                          for i, (n, a) in enumerate(calls)))
        if first is None and repeats_in(proposed, scan(history, repeats)):
            first = count - 1
        for (name, arguments), result in zip(calls, results, strict=False):
            history.append(Step(name, canonical(arguments), normal_text(result)))
    return first, count


def replay(out: Path, repeats: int) -> list[str]:
    lines = [f"loop replay of {out} at loop_repeats={repeats} (step: 0-based, per turn)"]
    for path in sorted((out / "bfcl").glob("*/result/*/multi_turn/*_result.json")):
        arm = path.parents[3].name
        cases = turns = forced = after = 0
        firsts: list[int] = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            hit = False
            for turn in record.get("inference_log") or []:
                if not isinstance(turn, dict):
                    continue
                first, steps = first_repeat(turn, repeats)
                if first is None:
                    continue
                hit, turns = True, turns + 1
                firsts.append(first)
                if steps > STEP_LIMIT:
                    forced += 1
                    after += steps - first
            cases += hit
        shown = ", ".join(map(str, sorted(firsts))) or "-"
        lines.append(f"  {arm}: cases with a repeat {cases}, turns {turns} (first repeat at "
                     f"step {shown}); force-terminated turns among them {forced}, "
                     f"their steps from the first repeat on {after}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.bfcl.loop_replay", description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    args = parser.parse_args(argv)
    print("\n".join(replay(args.out, args.repeats)))


if __name__ == "__main__":
    main()
