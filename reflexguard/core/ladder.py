"""The repair ladder: validate, fix, re-ask, constrain, give up. I/O is injected.

`run_ladder` never opens a socket itself: it is handed a `send` coroutine that posts a
body upstream and returns the completion. Tests drive it with a fake upstream behind
the real HTTP client; the server drives it with the pooled aiohttp client.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import orjson
from tenacity import AsyncRetrying, retry_if_result, stop_after_attempt

from reflexguard.core.channels import Channel
from reflexguard.core.completion import (
    choices_of,
    lift_text_calls,
    reply_of,
    sum_usage,
    unwrap_abstention,
    with_reply,
)
from reflexguard.core.fit import no_tool_fits
from reflexguard.core.fixes import FixPolicy, apply_fixes
from reflexguard.core.loops import LoopReport
from reflexguard.core.model import JsonObject, Reply, Verdict
from reflexguard.core.repair import (
    ABSTAIN_KEY,
    ConstrainedMode,
    ReaskTokens,
    bounded,
    client_token_limit,
    completion_tokens,
    constrain,
    reask_body,
)
from reflexguard.core.toolset import ToolSet
from reflexguard.core.validate import CallRules, validate_reply

if TYPE_CHECKING:
    from reflexguard.core.inject import InjectedFault

# "loop": the loop guard's one re-ask about a repeated call (core/loop_guard.py).
AttemptKind = Literal["initial", "fix", "reask", "constrained", "loop"]
Outcome = Literal[
    "clean", "observed", "fixed_by_fix", "fixed_by_reask", "fixed_by_constrained", "exhausted",
    "not_repaired", "repeated_failure",
]
# The ladder ran and no attempt was valid: the agent gets what `on_exhausted` says.
GAVE_UP: frozenset[Outcome] = frozenset({"exhausted", "repeated_failure"})
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
MAX_REPAIRS_CEILING = 10
FIX_PASSES = 2
# What the agent reads when an invalid call is withheld and its reply had no text of its
# own: a question to the user, which costs an agent's error budget nothing.
WITHHELD_TEXT = ("I could not complete that step. Could you confirm the details so I can "
                 "try again?")


class UpstreamFailure(Exception):
    """Raised by a `send` coroutine when the upstream did not produce a completion."""


@dataclass(frozen=True)
class GuardPolicy:
    repair: bool = True
    max_repairs: int = 2
    constrained: ConstrainedMode = "off"
    fixes: FixPolicy = field(default_factory=FixPolicy)
    lift_text_calls: bool = False
    on_exhausted: OnExhausted = "best"
    # How many tokens a re-ask (and the constrained attempt) may answer with.
    reask_tokens: ReaskTokens = field(default_factory=ReaskTokens)
    # The re-ask (1-based) from which every attempt is constrained; None: only the last.
    constrained_from: int | None = None
    # The edge must check `ungrounded_entity` for this request even when grounding is off.
    ground_entities: bool = False


@dataclass(frozen=True)
class Attempt:
    number: int
    kind: AttemptKind
    completion: JsonObject
    replies: tuple[Reply, ...]
    verdicts: tuple[Verdict, ...]
    upstream_seconds: float
    fixes: tuple[str, ...] = ()
    lifted: bool = False
    # Faults put on this answer by `inject_faults` (testing only, core/inject.py).
    injected: tuple[InjectedFault, ...] = ()

    @property
    def valid(self) -> bool:
        return all(v.valid for v in self.verdicts)

    @property
    def reply(self) -> Reply:
        return self.replies[0] if self.replies else Reply()

    @property
    def verdict(self) -> Verdict:
        return self.verdicts[0] if self.verdicts else Verdict()

    @property
    def changed(self) -> bool:
        """Whether the agent must get a rewritten body rather than the upstream's bytes."""
        return self.kind != "initial" or bool(self.fixes) or self.lifted or bool(self.injected)


@dataclass
class LadderResult:
    attempts: list[Attempt]
    outcome: Outcome
    fallbacks: list[str] = field(default_factory=list)
    failed_calls: int = 0  # upstream calls that produced no completion
    # Upstream attempts made and never candidates for the agent's answer (a loop re-ask
    # whose answer was not used): counted in the calls made and the usage the agent pays.
    unused: list[Attempt] = field(default_factory=list)
    loop: LoopReport | None = None  # what the loop guard saw and did (core/loop_guard.py)

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]

    @property
    def gave_up(self) -> bool:
        return self.outcome in GAVE_UP

    @property
    def upstream_calls(self) -> int:
        return (sum(1 for a in self.attempts if a.kind != "fix") + len(self.unused)
                + self.failed_calls)

    @property
    def violations(self) -> int:
        return sum(len(v.violations) for a in (*self.attempts, *self.unused)
                   for v in a.verdicts)


Send = Callable[[JsonObject], Awaitable[JsonObject]]
OnAttempt = Callable[[Attempt], None]
# A re-ask's answer as a damaged model would have given it (`inject_faults`, testing only):
# given the request that was sent, so its faults are seeded by that request.
Damage = Callable[[JsonObject, Attempt], Attempt]
ReaskBuilder = Callable[[JsonObject, Reply, Verdict, ToolSet], JsonObject]
ConstrainBuilder = Callable[[JsonObject, ConstrainedMode, Reply, Verdict, ToolSet], JsonObject]


@dataclass(frozen=True)
class RequestBuilders:
    """How a re-ask and the constrained last attempt are written in the wire format `send`
    posts. The ladder decides when; a dialect decides how the request reads, so the ladder
    never knows which dialect it serves. Chat Completions is the default."""

    reask: ReaskBuilder = reask_body
    constrain: ConstrainBuilder = constrain
    # False where the constrained attempt is always a forced tool choice (the native
    # Messages and Responses builders): the answer then never needs lifting from text.
    json_constraints: bool = True


CHAT_BUILDERS = RequestBuilders()


def only_check_faults(attempt: Attempt) -> bool:
    """Every violation of the attempt is a fault of our validator's (Channel.CHECK_FAULT)."""
    violations = [v for verdict in attempt.verdicts for v in verdict.violations]
    return bool(violations) and all(v.channel is Channel.CHECK_FAULT for v in violations)


def _only_ungrounded(verdict: Verdict) -> bool:
    """An invented identifier is fixed by asking the user, which a forced call forbids."""
    violations = verdict.violations
    return bool(violations) and all(v.channel is Channel.UNGROUNDED_ENTITY for v in violations)


def _read_reply(reply: Reply, lift: bool, json_mode: bool) -> Reply:
    if json_mode:  # a JSON-constrained attempt may answer without a call (repair.constrain)
        answer = unwrap_abstention(reply, ABSTAIN_KEY)
        if answer is not reply:
            return answer  # an abstention's text is an answer, never lifted into a call
    return lift_text_calls(reply) if lift else reply


def read_attempt(
    number: int, kind: AttemptKind, completion: JsonObject, rules: CallRules,
    lift: bool, seconds: float, json_mode: bool = False,
) -> Attempt:
    read = [reply_of(choice) for choice in choices_of(completion)] or [Reply()]
    replies = [_read_reply(r, lift, json_mode) for r in read]
    verdicts = tuple(validate_reply(r, rules) for r in replies)
    lifted = any(a is not b for a, b in zip(read, replies, strict=True))
    return Attempt(number, kind, completion, tuple(replies), verdicts, seconds, lifted=lifted)


def call_signature(reply: Reply) -> tuple[tuple[str, str], ...] | None:
    """A reply's calls as (name, canonical arguments): parsed JSON with sorted keys, or the
    raw text when it does not parse. None for a reply without calls."""
    if not reply.tool_calls:
        return None
    calls = []
    for call in reply.tool_calls:
        # orjson: ~10x the stdlib's speed on a long answer (issue 18: a 1.5 MB argument
        # cost ~0.2 s of loop here per attempt). What it refuses (NaN, integers past 64
        # bits, nesting past 1024) compares as its raw text, which is still a signature.
        try:
            arguments = orjson.dumps(orjson.loads(call.arguments),
                                     option=orjson.OPT_SORT_KEYS).decode()
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            arguments = call.arguments
        calls.append((call.name, arguments))
    return tuple(calls)


def _fixed(attempt: Attempt, rules: CallRules, policy: FixPolicy) -> Attempt | None:
    reply, verdict, applied = attempt.reply, attempt.verdict, list[str]()
    for _ in range(FIX_PASSES):
        reply, fixes = apply_fixes(reply, verdict, rules.toolset, policy)
        if not fixes:
            break
        applied.extend(fixes)
        verdict = validate_reply(reply, rules)
        if verdict.valid:
            break
    if not applied:
        return None
    return Attempt(
        attempt.number, "fix", attempt.completion, (reply,), (verdict,), 0.0, tuple(applied),
        lifted=attempt.lifted,
    )


# The most argument text an invalid reply may carry and still be re-asked about (256 Ki
# characters, about 64k tokens: past most served models' context already).
MAX_REASK_REPLY_CHARS = 256 * 1024


def settled_without_repair(first: Attempt, policy: GuardPolicy) -> LadderResult | None:
    """The ladder's result when the first answer calls for no repair at all (valid, observe
    mode, or a reply the ladder never re-asks); None when the ladder has work to do."""
    if first.valid:
        return LadderResult([first], "clean")
    if not policy.repair:
        return LadderResult([first], "observed")
    if only_check_faults(first):
        # Our validator failed, the model did nothing wrong that we know of: a re-ask
        # would spend a model call on our fault. Passed on as written, never as valid.
        return LadderResult([first], "not_repaired", ["check_fault_not_repaired"])
    if len(first.replies) != 1:
        return LadderResult([first], "not_repaired", ["multiple_choices_not_repaired"])
    if sum(len(call.arguments) for call in first.reply.tool_calls) > MAX_REASK_REPLY_CHARS:
        # Re-asking echoes the whole call into the model's context, and every attempt
        # costs a read of it on the event loop (issue 18): a call this large is answered
        # as the model wrote it, and counted.
        return LadderResult([first], "not_repaired", ["reply_too_large_to_reask"])
    if first.reply.finish_reason == "length" and policy.constrained == "off":
        # A reply cut off at max_tokens would be cut off again: re-asking only costs time.
        return LadderResult([first], "not_repaired", ["truncated_reply_not_repaired"])
    return None


async def run_ladder(
    body: JsonObject,
    first: Attempt,
    rules: CallRules,
    policy: GuardPolicy,
    send: Send,
    on_attempt: OnAttempt,
    builders: RequestBuilders = CHAT_BUILDERS,
    damage: Damage | None = None,
) -> LadderResult:
    attempts = [first]
    on_attempt(first)
    settled = settled_without_repair(first, policy)
    if settled is not None:
        return settled
    truncated = first.reply.finish_reason == "length"

    def fix(attempt: Attempt) -> Attempt:
        fixed = _fixed(attempt, rules, policy.fixes)
        if fixed is None:
            return attempt
        attempts.append(fixed)
        on_attempt(fixed)
        return fixed

    latest = fix(first)
    if latest.valid:
        return LadderResult(attempts, "fixed_by_fix")
    repairs = min(policy.max_repairs, MAX_REPAIRS_CEILING)
    fallbacks: list[str] = []
    if truncated and repairs > 0:
        # A free re-ask would run into max_tokens again; one constrained call is short.
        repairs = 1
        fallbacks.append("truncated_reply_constrained_only")
    if repairs <= 0:
        return LadderResult(attempts, "exhausted", ["exhausted"])
    failed_calls = 0
    # One bound for every re-ask: an unbounded one ran a small model to its context's end.
    max_tokens = policy.reask_tokens.limit(completion_tokens(first.completion),
                                           client_token_limit(body))
    constrained_from = min(policy.constrained_from or repairs, repairs)
    # Every invalid reply so far, by its calls: a re-ask that brings one back is a repeat.
    seen = {s for a in attempts if (s := call_signature(a.reply)) is not None}
    repeated = jump = stop = False

    def constrainable() -> bool:
        return policy.constrained != "off" and not _only_ungrounded(latest.verdict)

    # The model's own first answer is the evidence that no tool fits (core/fit.py); a
    # re-ask that then calls an offered tool answers our "call one of these", so the
    # constrained attempt keeps reading the first answer, unless the client requires a
    # call: then the tool the latest reply reached for is the better one to force.
    first_outside = (no_tool_fits(first.reply, first.verdict, rules.toolset)
                     and rules.tool_choice.mode not in ("required", "named"))

    async def reask() -> Attempt:
        nonlocal latest, failed_calls, repeated, jump, stop
        number = len([a for a in attempts if a.kind != "fix"]) + 1
        forced = jump  # the one constrained attempt a repeat earned
        outside = first_outside or no_tool_fits(latest.reply, latest.verdict, rules.toolset)
        if outside and "no_tool_fits" not in fallbacks:
            # The builders then allow a text answer and, where the client allows text,
            # constrain to nothing else (core/fit.py): counted, once per ladder.
            fallbacks.append("no_tool_fits")
        request = builders.reask(body, latest.reply, latest.verdict, rules.toolset)
        kind: AttemptKind = "reask"
        if (forced or number - 1 >= constrained_from) and constrainable():
            source = first if first_outside else latest
            request = builders.constrain(request, policy.constrained, source.reply,
                                         source.verdict, rules.toolset)
            kind = "constrained"
        request = bounded(request, max_tokens)
        json_mode = (kind == "constrained" and policy.constrained != "tool_choice"
                     and builders.json_constraints)
        started = time.perf_counter()
        try:
            completion = await send(request)
        except UpstreamFailure:
            failed_calls += 1
            raise
        attempt = read_attempt(
            number, kind, completion, rules, policy.lift_text_calls or json_mode,
            time.perf_counter() - started, json_mode=json_mode,
        )
        if damage is not None:
            attempt = damage(request, attempt)
        attempts.append(attempt)
        on_attempt(attempt)
        latest = fix(attempt) if not attempt.valid else attempt
        stop = forced
        if not latest.valid:
            signatures = {s for s in (call_signature(attempt.reply), call_signature(latest.reply))
                          if s is not None}
            if signatures & seen:
                # The same request would most likely get the same call a third time:
                # change the request (constrain it) or stop spending attempts on it.
                repeated = True
                if kind != "constrained" and number - 1 < repairs and constrainable():
                    jump = True
                    fallbacks.append("repeated_call_constrained")
                else:
                    stop = True
            seen.update(signatures)
        return latest

    retrying = AsyncRetrying(
        stop=stop_after_attempt(repairs),
        retry=retry_if_result(lambda attempt: not attempt.valid and not stop),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        reraise=True,
    )
    try:
        await retrying(reask)
    except UpstreamFailure:
        fallbacks.append("repair_upstream_error")
    final = attempts[-1]
    if final.valid:
        outcome: Outcome = "fixed_by_constrained" if final.kind == "constrained" or (
            final.kind == "fix" and attempts[-2].kind == "constrained") else "fixed_by_reask"
        return LadderResult(attempts, outcome, fallbacks, failed_calls)
    if repeated:
        return LadderResult(attempts, "repeated_failure", [*fallbacks, "repeated_failure"],
                            failed_calls)
    return LadderResult(attempts, "exhausted", [*fallbacks, "exhausted"], failed_calls)


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
