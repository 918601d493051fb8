"""What the agent gets from a ladder's attempts: which one, under `on_exhausted`, how it is
labelled, and its completion with every attempt's usage. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Literal

from reflexguard.core.attempts import Attempt, LadderResult, only_check_faults
from reflexguard.core.channels import Channel
from reflexguard.core.completion import sum_usage, with_reply
from reflexguard.core.model import JsonObject, Reply, Verdict

OnExhausted = Literal["best", "passthrough", "original", "error", "withhold"]
# The choices that pass an invalid reply on: a low error budget turns them into withhold.
PASSING_ON: frozenset[OnExhausted] = frozenset({"best", "passthrough", "original"})
# How much a channel costs the agent that gets it, least first (docs/repair.md, "The
# least-bad answer"): a call of an offered tool with JSON arguments can still be run or
# refused precisely by the tool; a call written as text, arguments that are not JSON,
# a tool that does not exist and an empty reply give the agent less and less to use.
SEVERITY: dict[Channel, int] = {
    Channel.OK: 0,
    Channel.CHECK_FAULT: 0,  # unchecked, not known to be wrong: counted, ranked as OK
    Channel.CHOICE_VIOLATION: 1,
    Channel.SCHEMA_VIOLATION: 2,
    Channel.UNGROUNDED_ENTITY: 3,
    Channel.VANISHED_CALL: 4,
    Channel.MALFORMED_ARGS: 5,
    Channel.UNKNOWN_TOOL: 6,
    Channel.EMPTY_REPLY: 7,
}
# What the agent reads when an invalid call is withheld and its reply had no text of its
# own: a question to the user, which costs an agent's error budget nothing.
WITHHELD_TEXT = ("I could not complete that step. Could you confirm the details so I can "
                 "try again?")



def withholds(result: LadderResult, on_exhausted: OnExhausted) -> bool:
    """Whether `on_exhausted: withhold` keeps this result's invalid calls from the agent:
    the ladder repaired (or declined to repair) one reply and it is still invalid."""
    final = result.final
    return (on_exhausted == "withhold" and result.outcome != "observed"
            and not final.valid and len(final.replies) == 1 and not only_check_faults(final))


def withheld_attempt(result: LadderResult) -> Attempt:
    """The reply without its calls: the model's first text to the agent, or WITHHELD_TEXT.

    Numbered 1 as the first answer is: a stream has already forwarded that answer's text,
    so only its held rest is written; `lifted` when the text is ours (or a lifted reply's,
    all of it held), which the agent has not seen yet.
    """
    first = result.attempts[0]
    own = first.reply.content if first.reply.content and first.reply.content.strip() else None
    reply = Reply(content=own or WITHHELD_TEXT, finish_reason="stop")
    return Attempt(1, "fix", first.completion, (reply,), (Verdict(),), 0.0,
                   ("invalid_call_withheld",), lifted=own is None or first.lifted)


def badness(attempt: Attempt) -> tuple[int, tuple[int, ...]]:
    """The order of `best`, least bad first: fewer invalid calls, then the severity of its
    channels (SEVERITY), worst first. Equal badness is broken by `least_bad`: the earliest."""
    violations = [v for verdict in attempt.verdicts for v in verdict.violations]
    return len(violations), tuple(sorted((SEVERITY[v.channel] for v in violations),
                                         reverse=True))


def least_bad(result: LadderResult) -> Attempt:
    """The attempt `on_exhausted: best` returns: the first answer unless a later attempt
    is strictly less bad (min keeps the first of equals, and attempts are in order)."""
    return min(result.attempts, key=badness)


def returned_attempt(result: LadderResult, on_exhausted: OnExhausted) -> Attempt:
    """The attempt whose reply the agent gets: the final one, or after a ladder that gave
    up, with `best` the least bad attempt (never worse than the first answer), with
    `original` the model's first answer (exactly what the agent would have had without
    reflexguard), with `passthrough` the last; with `withhold`, that reply without calls."""
    if withholds(result, on_exhausted):
        return withheld_attempt(result)
    if result.gave_up and on_exhausted == "original":
        return result.attempts[0]
    if result.gave_up and on_exhausted == "best":
        return least_bad(result)
    return result.final


def chosen_attempt(result: LadderResult, returned: Attempt) -> str:
    """Which attempt the agent got, as the header and the outcome record say it: its
    number (1: the first answer), with `+fix` when the deterministic fixes rewrote it
    and `+withheld` when its calls were held back."""
    if "invalid_call_withheld" in returned.fixes:
        return f"{returned.number}+withheld"
    return f"{returned.number}+fix" if returned.kind == "fix" else str(returned.number)


def chosen_label(result: LadderResult, on_exhausted: OnExhausted) -> str:
    """`chosen_attempt` of what the agent gets under `on_exhausted`, or "none" when it
    gets the exhausted error instead (`on_exhausted: error`)."""
    if result.gave_up and on_exhausted == "error":
        return "none"
    return chosen_attempt(result, returned_attempt(result, on_exhausted))


def settle_choice(result: LadderResult, on_exhausted: OnExhausted) -> str:
    """Which attempt the agent gets, for the outcome record; the fallbacks it takes
    (withheld; under `best`, an earlier attempt than the last) added to the result's."""
    if withholds(result, on_exhausted):
        result.fallbacks.append("invalid_call_withheld")
    returned = returned_attempt(result, on_exhausted)
    if result.gave_up and on_exhausted == "best" and returned is not result.final:
        result.fallbacks.append("least_bad_attempt_returned")
    return chosen_label(result, on_exhausted)


def agent_completion(result: LadderResult, final: Attempt | None = None) -> JsonObject:
    """What the agent receives: the returned reply, with usage summed over every attempt.

    When a re-ask produced the calls, the model's prose is dropped: it answers our repair
    prompt, not the agent, and would leak the repair into the agent's history.
    """
    final = final or result.final
    reply = final.reply
    if final.valid and final.number > 1 and reply.tool_calls:
        reply = Reply(content=None, tool_calls=reply.tool_calls, finish_reason="tool_calls")
    elif reply.tool_calls and reply.finish_reason in (None, "stop"):
        reply = Reply(content=reply.content, tool_calls=reply.tool_calls,
                      finish_reason="tool_calls")
    completion = with_reply(final.completion, reply)
    seen: set[int] = set()
    usages = []
    for attempt in (*result.attempts, *result.unused):
        if id(attempt.completion) not in seen:
            seen.add(id(attempt.completion))
            usages.append(attempt.completion.get("usage"))
    total = sum_usage(usages)
    if total is not None:
        completion["usage"] = {**(final.completion.get("usage") or {}), **total}
    return completion
