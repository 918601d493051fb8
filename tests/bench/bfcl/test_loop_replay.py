"""bench.bfcl.loop_replay: the loop guard's scan over BFCL's recorded steps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.bfcl.loop_replay import first_repeat, replay


def step(name: str, arguments: str, result: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": [{name: arguments}]},
            {"role": "handler_log", "content": "Successfully decoded model response."},
            {"role": "tool", "content": result}]


def turn(*steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"begin_of_turn_query": [{"role": "user", "content": "go"}],
            **{f"step_{i}": s for i, s in enumerate(steps)}}


CAT = ("cat", '{"file_name": "example.txt"}')


def test_the_first_repeat_is_the_third_identical_call_with_one_result() -> None:
    loop = turn(step("ls", "{}", "a"), *[step(*CAT, "no such file")] * 5)
    assert first_repeat(loop, 2) == (3, 6)


def test_a_tool_with_a_changing_result_never_repeats() -> None:
    speeds = turn(*[step("get_current_speed", "{}", f'{{"speed": {v}}}') for v in range(21)])
    assert first_repeat(speeds, 2) == (None, 21)


def test_the_replay_reads_an_arms_result_file(tmp_path: Path) -> None:
    where = tmp_path / "bfcl" / "m@Q4_K_M-on" / "result" / "m-FC" / "multi_turn"
    where.mkdir(parents=True)
    forced = turn(*[step(*CAT, "no such file")] * 21)
    record = {"id": "multi_turn_base_1", "inference_log": [
        [{"role": "state_info"}], turn(step("ls", "{}", "a")), forced]}
    (where / "BFCL_v4_multi_turn_base_result.json").write_text(json.dumps(record) + "\n")
    (line,) = replay(tmp_path, 2)[1:]
    assert "m@Q4_K_M-on: cases with a repeat 1, turns 1 (first repeat at step 2)" in line
    assert "force-terminated turns among them 1, their steps from the first repeat on 19" in line
