"""The repair ladder: validate, fix, re-ask, constrain, give up. I/O is injected.

`run_ladder` never opens a socket itself: it is handed a `send` coroutine that posts a
body upstream and returns the completion. Tests drive it with a fake upstream behind
the real HTTP client; the server drives it with the pooled aiohttp client.

The ladder's records (attempts, results) are core/attempts.py's; what the agent gets from
them, core/choice.py's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson
from tenacity import AsyncRetrying, retry_if_result, stop_after_attempt

from reflexguard.core.attempts import (
    Attempt,
    AttemptKind,
    LadderResult,
    Outcome,
    UpstreamFailure,
    only_check_faults,
    read_attempt,
)
from reflexguard.core.channels import Channel
from reflexguard.core.choice import OnExhausted
from reflexguard.core.fit import no_tool_fits
from reflexguard.core.fixes import FixPolicy, apply_fixes
from reflexguard.core.model import JsonObject, Reply, Verdict
from reflexguard.core.repair import (
    ConstrainedMode,
    ReaskTokens,
    bounded,
    client_token_limit,
    completion_tokens,
    constrain,
    reask_body,
)
from reflexguard.core.tool_records import ToolSet
from reflexguard.core.validate import CallRules, validate_reply

MAX_REPAIRS_CEILING = 10
FIX_PASSES = 2


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



def _only_ungrounded(verdict: Verdict) -> bool:
    """An invented identifier is fixed by asking the user, which a forced call forbids."""
    violations = verdict.violations
    return bool(violations) and all(v.channel is Channel.UNGROUNDED_ENTITY for v in violations)



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
