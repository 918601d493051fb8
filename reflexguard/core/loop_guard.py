"""The loop guard: after the ladder, a reply that only repeats itself. I/O is injected.

The ladder makes each call valid; this stage looks at the reply the agent is about to get
as a step of its trajectory. When a call in it repeats a call the conversation already made
`loop_repeats` times with one result (reflexguard/core/loops.py), then by `loop_guard`:

- `observe`: the reply goes out as it is; the repeat is counted (`LoopReport`).
- `repair`: one re-ask per run of repeats (at the repeat that first reaches
  `loop_repeats`; later repeats of the same run are kept and counted), through the ladder's
  own builders (the dialect's wire format) and
  bounds (the re-ask length, and the request's deadline at the edge), whose tool message
  says exactly what was repeated, how often and with what result (quoted, clipped and
  defanged: core/feedback.py `repeated_call_note`). A valid answer that repeats nothing is
  the agent's; otherwise (it repeats again, is invalid, or the upstream failed) the agent
  gets the reply it would have had without the loop guard, and that is counted. So the
  guard is never worse than none, at the price of one upstream call.

Only a reply of one choice whose calls are all valid is looked at: an invalid reply is the
ladder's, and an answer the ladder gave up on is not made worse by a second opinion. A
repeat is not a failed call: nothing here touches the error budget (the agent's failures
are read from tool results, and the re-ask's note never reaches the agent).
A named `tool_choice` forces the call the client wants, so its repeat is counted and kept
without a re-ask.

- `stop`: as `repair`, but where repair would keep the repeated reply (the re-ask repeated
  again, was invalid, failed or ran out of time, or the run is past its one re-ask) the
  agent gets a text answer instead: reflexguard's, labelled as such, saying what was
  repeated and what it returned (core/feedback.py `loop_stopped_text`). A text answer ends
  the agent's step, so a loop costs at most one re-ask instead of running to the agent's
  step limit. Counted (`repeated_call_stopped`). Still not an error: the budget is untouched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Literal

from reflexguard.core.attempts import Attempt, LadderResult, UpstreamFailure, read_attempt
from reflexguard.core.channels import Channel
from reflexguard.core.choice import OnExhausted, returned_attempt
from reflexguard.core.feedback import loop_stopped_text, repeated_call_note
from reflexguard.core.ladder import CHAT_BUILDERS, OnAttempt, RequestBuilders, Send
from reflexguard.core.loops import DEFAULT_REPEATS, LoopIndex, LoopReport, Repeat, repeats_in
from reflexguard.core.model import CallVerdict, JsonObject, Reply, Verdict
from reflexguard.core.repair import ReaskTokens, bounded, client_token_limit, completion_tokens
from reflexguard.core.validate import CallRules

LoopMode = Literal["off", "observe", "repair", "stop"]
LOOP_MODES: tuple[LoopMode, ...] = ("off", "observe", "repair", "stop")
# The fallback counted whenever a repeated reply reaches the agent after a re-ask was due.
KEPT = "repeated_call_kept"
# The fallback counted whenever `stop` gives the agent a text answer for a repeated reply.
STOPPED = "repeated_call_stopped"


@dataclass(frozen=True)
class LoopPolicy:
    mode: LoopMode = "off"
    repeats: int = DEFAULT_REPEATS  # `loop_repeats`: earlier identical calls that make one

    @property
    def on(self) -> bool:
        return self.mode != "off"


def looked_at(result: LadderResult, on_exhausted: OnExhausted) -> Attempt | None:
    """The attempt the agent would get, when the loop guard looks at it: one choice, every
    call valid, at least one call."""
    if result.gave_up:
        return None
    returned = returned_attempt(result, on_exhausted)
    if len(returned.replies) != 1 or not returned.valid or not returned.reply.tool_calls:
        return None
    return returned


def loop_verdict(attempt: Attempt, repeats: tuple[tuple[int, Repeat], ...]) -> Verdict:
    """The attempt's verdict with each repeated call in `repeated_call`, its note the
    detail: what the re-ask's tool message says about it (core/feedback.py)."""
    by_position = dict(repeats)
    calls = []
    for position, call in enumerate(attempt.reply.tool_calls):
        repeat = by_position.get(position)
        if repeat is None:
            calls.append(CallVerdict(channel=Channel.OK, index=position, name=call.name))
        else:
            calls.append(CallVerdict(
                channel=Channel.REPEATED_CALL, index=position, name=call.name,
                detail=repeated_call_note(call.name, repeat.times, repeat.result)))
    return Verdict(calls=tuple(calls))


def stopped_attempt(returned: Attempt, repeats: tuple[tuple[int, Repeat], ...]) -> Attempt:
    """The repeated reply replaced by reflexguard's text answer (`loop_stopped_text` of each
    repeated call). Numbered as the reply it replaces, a fix with `lifted` set: the text is
    ours, so a stream writes all of it (the repeated calls were held, never forwarded)."""
    text = "\n".join(loop_stopped_text(returned.reply.tool_calls[position].name,
                                        repeat.times, repeat.result)
                      for position, repeat in repeats)
    reply = Reply(content=text, finish_reason="stop")
    return Attempt(returned.number, "fix", returned.completion, (reply,), (Verdict(),), 0.0,
                   (STOPPED,), lifted=True)


def _kept(result: LadderResult, report: LoopReport, unused: Attempt | None = None,
          failed: int = 0, stop: Attempt | None = None) -> LadderResult:
    """The model's repeated reply for the agent, or, given the reply to `stop` (the
    `stop` mode), reflexguard's text answer in its place."""
    unused_attempts = [*result.unused, *([unused] if unused else [])]
    failed_calls = result.failed_calls + failed
    if stop is not None:
        return replace(result, attempts=[*result.attempts, stopped_attempt(stop,
                                                                           report.repeats)],
                       fallbacks=[*result.fallbacks, STOPPED], unused=unused_attempts,
                       failed_calls=failed_calls, loop=replace(report, action="stopped"))
    return replace(result, fallbacks=[*result.fallbacks, KEPT], unused=unused_attempts,
                   failed_calls=failed_calls, loop=report)


def settled_without_reask(result: LadderResult, rules: CallRules, policy: LoopPolicy,
                          index: LoopIndex, on_exhausted: OnExhausted) -> LadderResult | None:
    """The result when the loop guard makes no upstream call: off, nothing to look at,
    nothing repeated, observe mode (with its report), a named tool_choice (kept, counted);
    None when a re-ask is due."""
    if not policy.on or not index:
        return result
    returned = looked_at(result, on_exhausted)
    if returned is None:
        return result
    repeats = repeats_in(returned.reply, index)
    if not repeats:
        return result
    if policy.mode == "observe":
        return replace(result, loop=LoopReport(repeats, "observed"))
    if rules.tool_choice.mode == "named":
        return _kept(result, LoopReport(repeats, "kept", "named_tool_choice"))
    if not any(repeat.times == policy.repeats for _, repeat in repeats):
        # One re-ask per run of repeats: at the repeat that first reaches loop_repeats. A
        # model that repeats again after it would most likely repeat again after another,
        # and a re-ask at every later step would double the cost of every looping step.
        return _kept(result, LoopReport(repeats, "kept", "past_threshold"),
                     stop=returned if policy.mode == "stop" else None)
    return None


def out_of_time(result: LadderResult, index: LoopIndex, on_exhausted: OnExhausted,
                policy: LoopPolicy | None = None) -> LadderResult:
    """The result when the request's deadline fell during the loop re-ask: the reply kept
    (with `stop`, stopped), the re-ask counted as a call that produced nothing."""
    returned = looked_at(result, on_exhausted)
    repeats = repeats_in(returned.reply, index) if returned is not None else ()
    stop = returned if policy is not None and policy.mode == "stop" and repeats else None
    return _kept(result, LoopReport(repeats, "kept", "deadline"), failed=1, stop=stop)


async def guard_loops(body: JsonObject, result: LadderResult, rules: CallRules,
                      policy: LoopPolicy, index: LoopIndex, send: Send, on_attempt: OnAttempt,
                      on_exhausted: OnExhausted, reask_tokens: ReaskTokens,
                      lift_text_calls: bool,
                      builders: RequestBuilders = CHAT_BUILDERS) -> LadderResult:
    """The ladder's result, with the loop guard's report and, where a re-ask replaced a
    repeated reply, its attempt last. `body` is the request the re-ask extends, in the wire
    format `send` posts; an UpstreamFailure of the re-ask is absorbed (the reply is kept).
    A deadline is the caller's to set around this (a TimeoutError propagates: then
    `out_of_time`)."""
    settled = settled_without_reask(result, rules, policy, index, on_exhausted)
    if settled is not None:
        return settled
    returned = looked_at(result, on_exhausted)
    assert returned is not None  # settled_without_reask returned None: it looked
    repeats = repeats_in(returned.reply, index)
    request = builders.reask(body, returned.reply, loop_verdict(returned, repeats),
                             rules.toolset)
    first = result.attempts[0]
    request = bounded(request, reask_tokens.limit(completion_tokens(first.completion),
                                                  client_token_limit(body)))
    number = sum(1 for a in (*result.attempts, *result.unused) if a.kind != "fix") \
        + result.failed_calls + 1
    stop = returned if policy.mode == "stop" else None
    started = time.perf_counter()
    try:
        completion = await send(request)
    except UpstreamFailure:
        return _kept(result, LoopReport(repeats, "kept", "upstream_error", number), failed=1,
                     stop=stop)
    attempt = read_attempt(number, "loop", completion, rules, lift_text_calls,
                           time.perf_counter() - started)
    on_attempt(attempt)
    if not attempt.valid or len(attempt.replies) != 1:
        return _kept(result, LoopReport(repeats, "kept", "invalid", number), attempt,
                     stop=stop)
    if repeats_in(attempt.reply, index):
        return _kept(result, LoopReport(repeats, "kept", "repeated_again", number), attempt,
                     stop=stop)
    return replace(result, attempts=[*result.attempts, attempt],
                   loop=LoopReport(repeats, "replaced", attempt=number))
