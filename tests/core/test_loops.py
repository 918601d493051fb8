"""The loop scan (reflexguard/core/loops.py): which calls of a reply repeat the trajectory.

Including the two agents the guard must never stop: a poller whose result changes until it
says "done", and an agent that re-reads a file after writing it.
"""

from __future__ import annotations

from reflexguard.core.loops import Step, canonical, normal_text, repeats_in, scan
from reflexguard.core.model import Reply, ToolCall


def step(name: str, arguments: str = "{}", result: str | None = "ok") -> Step:
    return Step(name, canonical(arguments), None if result is None else normal_text(result))


def reply(*calls: tuple[str, str]) -> Reply:
    return Reply(tool_calls=tuple(ToolCall(id=f"c{i}", name=n, arguments=a)
                                  for i, (n, a) in enumerate(calls)))


CAT = ("cat", '{"file_name": "example.txt"}')


def test_a_call_made_twice_with_one_result_is_a_repeat_the_third_time() -> None:
    index = scan([step(*CAT, "hello"), step(*CAT, "hello")], repeats=2)
    found = repeats_in(reply(CAT), index)
    assert [(position, r.name, r.times, r.result) for position, r in found] == [
        (0, "cat", 2, "hello")]


def test_once_is_not_a_repeat_at_the_default() -> None:
    assert not repeats_in(reply(CAT), scan([step(*CAT, "hello")], repeats=2))


def test_loop_repeats_is_the_threshold() -> None:
    steps = [step(*CAT, "hello")] * 3
    assert repeats_in(reply(CAT), scan(steps, repeats=3))
    assert not repeats_in(reply(CAT), scan(steps, repeats=4))
    assert repeats_in(reply(CAT), scan(steps[:1], repeats=1))


def test_arguments_compare_as_canonical_json() -> None:
    index = scan([step("f", '{"a": 1, "b": [1, 2]}', "r"), step("f", '{"b":[1,2],"a":1}', "r")],
                 repeats=2)
    assert repeats_in(reply(("f", '{ "b": [1, 2], "a": 1 }')), index)
    assert not repeats_in(reply(("f", '{"a": 1, "b": [2, 1]}')), index)
    assert not repeats_in(reply(("g", '{"a": 1, "b": [1, 2]}')), index)


def test_results_compare_after_whitespace_normalisation_and_exactly_otherwise() -> None:
    same = scan([step(*CAT, "hello  world\n"), step(*CAT, " hello world")], repeats=2)
    assert repeats_in(reply(CAT), same)
    differ = scan([step(*CAT, "hello world"), step(*CAT, "Hello world")], repeats=2)
    assert not repeats_in(reply(CAT), differ)


def test_a_polling_tool_whose_result_changes_until_done_never_fires() -> None:
    poll = ("job_status", '{"job": 7}')
    steps: list[Step] = []
    for result in ("running 10%", "running 50%", "running 90%", "done"):
        steps.append(step(*poll, result))
        assert not repeats_in(reply(poll), scan(steps, repeats=2)), result
    assert not repeats_in(reply(poll), scan(steps, repeats=1))  # polled: never, at any N


def test_a_poll_that_has_not_changed_yet_looks_like_a_loop() -> None:
    poll = ("job_status", '{"job": 7}')
    assert repeats_in(reply(poll), scan([step(*poll, "running")] * 2, repeats=2))


def test_a_result_that_alternates_is_never_a_repeat() -> None:
    poll = ("toggle", "{}")
    steps = [step(*poll, r) for r in ("on", "off", "on", "off", "on")]
    assert not repeats_in(reply(poll), scan(steps, repeats=2))


def test_a_file_re_read_after_writing_it_never_fires() -> None:
    read = ("cat", '{"file_name": "notes.txt"}')
    write = ("echo", '{"content": "new", "file_name": "notes.txt"}')
    # read, read, write: the read that follows is made after something new happened
    steps = [step(*read, "old"), step(*read, "old"), step(*write, "")]
    assert not repeats_in(reply(read), scan(steps, repeats=2))
    # and once re-read, its result differs from the earlier ones
    steps.append(step(*read, "new"))
    assert not repeats_in(reply(read), scan(steps, repeats=2))


def test_alternating_calls_that_bring_nothing_new_still_loop() -> None:
    """The count starts at the latest new step (the first `cat`), so `ls` needs one more
    round than `cat` to reach it."""
    ls, cat = ("ls", "{}"), CAT
    steps = [step(*ls, "example.txt"), step(*cat, "hello"), step(*ls, "example.txt"),
             step(*cat, "hello")]
    index = scan(steps, repeats=2)
    assert [r.name for _, r in repeats_in(reply(cat), index)] == ["cat"]
    assert not repeats_in(reply(ls), index)
    index = scan([*steps, step(*ls, "example.txt")], repeats=2)
    assert [r.name for _, r in repeats_in(reply(ls), index)] == ["ls"]


def test_a_new_result_in_between_restarts_the_count() -> None:
    steps = [step(*CAT, "hello"), step(*CAT, "hello"), step("ls", "{}", "a.txt b.txt"),
             step(*CAT, "hello")]
    assert not repeats_in(reply(CAT), scan(steps, repeats=2))


def test_calls_without_a_result_neither_count_nor_reset() -> None:
    steps = [step(*CAT, "hello"), step("ls", "{}", None), step(*CAT, "hello")]
    assert repeats_in(reply(CAT), scan(steps, repeats=2))
    assert not repeats_in(reply(CAT), scan([step(*CAT, None), step(*CAT, None)], repeats=2))


def test_calls_within_one_reply_are_not_counted_against_each_other() -> None:
    index = scan([step(*CAT, "hello")], repeats=2)
    assert not repeats_in(reply(CAT, CAT, CAT), index)


def test_every_repeated_call_of_a_parallel_reply_is_found_in_place() -> None:
    index = scan([step(*CAT, "hello"), step(*CAT, "hello")], repeats=2)
    found = repeats_in(reply(("ls", "{}"), CAT, ("pwd", "{}"), CAT), index)
    assert [position for position, _ in found] == [1, 3]


def test_arguments_that_are_not_json_compare_as_their_text() -> None:
    index = scan([step("f", "{broken", "r"), step("f", "{broken", "r")], repeats=2)
    assert repeats_in(reply(("f", "{broken")), index)
    assert not repeats_in(reply(("f", "{broken ")), index)


def test_canonical_reads_objects_and_strings_alike() -> None:
    assert canonical({"b": 1, "a": {"d": 2, "c": 3}}) == canonical('{"a":{"c":3,"d":2},"b":1}')
    assert canonical({"n": 2**70}) == canonical({"n": 2**70})  # past orjson's integers


def test_no_steps_no_index() -> None:
    assert not scan([], repeats=2)
    assert not repeats_in(reply(CAT), scan([], repeats=2))
