"""The agent's error budget: what it is, how much of it the conversation has spent, and how
the repair policy changes as it runs out. Nothing here does I/O.

An agent's episode ends at its K-th failed tool call (tau2's `max_errors`). The failures
already spent are read from the conversation the request carries, so any replica can
answer without shared state: a failed call's result is in every later request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from reflexguard.core.attempts import Attempt, LadderResult
from reflexguard.core.choice import PASSING_ON, returned_attempt
from reflexguard.core.errors import BadRequest
from reflexguard.core.ladder import MAX_REPAIRS_CEILING, GuardPolicy
from reflexguard.core.model import Reply
from reflexguard.core.validate import CallRules, validate_reply

BUDGET_HEADER = "x-reflexguard-error-budget"
REMAINING_HEADER = "x-reflexguard-budget-remaining"
MAX_BUDGET = 1000  # as Settings.error_budget's bound
DEFAULT_ERROR_PATTERN = r"^Error:"  # tau2 writes a raised tool error as "Error: <message>"
# At or below this many failures left, the ladder escalates (docs/repair.md's table).
LOW = 2
# The re-ask from which attempts are constrained once the budget is low: the first re-ask
# stays free, since its feedback names the fault and a grammar can force a wrong call.
LOW_CONSTRAINED_FROM = 2


@dataclass(frozen=True)
class Budget:
    limit: int
    spent: int  # failed tool results already in the conversation

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.spent)


def parse_budget(value: str) -> int:
    """The header's value: a whole number 1..1000; anything else is the client's mistake."""
    text = value.strip()
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_BUDGET:
        raise BadRequest(f"{BUDGET_HEADER} must be a whole number from 1 to {MAX_BUDGET}",
                         param=BUDGET_HEADER, code="invalid_error_budget")
    return int(text)


def content_text(content: object) -> str:
    """A string, or the text parts of a list of parts/blocks, joined (a tool result's text,
    as the budget and the loop scan read it)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(part["text"] for part in content
                     if isinstance(part, dict) and isinstance(part.get("text"), str))


def chat_errors(messages: Iterable[object], pattern: re.Pattern[str]) -> int:
    """Chat Completions: `tool` messages whose content matches `pattern`."""
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool"
               and pattern.search(content_text(m.get("content"))) is not None)


def messages_errors(messages: Iterable[object]) -> int:
    """Anthropic Messages: `tool_result` blocks marked `is_error: true`."""
    return sum(1 for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list)
               for block in m["content"] if isinstance(block, dict)
               and block.get("type") == "tool_result" and block.get("is_error") is True)


def responses_errors(items: object, pattern: re.Pattern[str]) -> int:
    """OpenAI Responses: `function_call_output` items whose output matches `pattern`."""
    if not isinstance(items, list):
        return 0
    return sum(1 for item in items if isinstance(item, dict)
               and item.get("type") == "function_call_output"
               and pattern.search(content_text(item.get("output"))) is not None)


def policy_for_budget(base: GuardPolicy, remaining: int | None) -> GuardPolicy:
    """The ladder for a request with `remaining` failures left (None: no budget known).

    Plenty left: the operator's ladder as configured. Two or fewer: one more re-ask, the
    constrained attempt from the second re-ask on (when a constrained mode is configured),
    and invented identifiers caught (`ungrounded_entity`). One or none: besides, an
    invalid call is never passed on (`withhold`): it would spend the episode's last unit.
    Observe mode, `max_repairs: 0` and `on_exhausted: error` are the operator's choices
    and stay as they are.
    """
    if remaining is None or remaining > LOW or not base.repair:
        return base
    policy = replace(base, ground_entities=True)
    if base.max_repairs > 0:
        policy = replace(policy, max_repairs=min(base.max_repairs + 1, MAX_REPAIRS_CEILING))
        if base.constrained != "off":
            policy = replace(policy, constrained_from=LOW_CONSTRAINED_FROM)
    if remaining <= 1 and base.on_exhausted in PASSING_ON:
        policy = replace(policy, on_exhausted="withhold")
    return policy


OVER_BUDGET_WITHHELD = "invalid_calls_over_budget_withheld"


def within_budget(result: LadderResult, policy: GuardPolicy, remaining: int | None,
                  rules: CallRules) -> tuple[LadderResult, GuardPolicy]:
    """The ladder's result with no more invalid calls passed on than the budget can take.

    An agent counts each failed call (tau2 ends the episode at its K-th); a reply of many
    parallel calls can spend the whole budget at once (a 0.5B model sent 18 in one turn on
    tau2). With `remaining` units left, `remaining - 1` invalid calls can be passed on
    without spending the last one (policy_for_budget's rule, per call). When the reply
    the agent would get holds more: its valid calls are kept, its invalid ones are kept
    in their order up to that number, the rest withheld (counted as
    `invalid_calls_over_budget_withheld`). Nothing the agent executes changes: an invalid
    call fails in the environment anyway; only the units it would spend are saved. The kept
    reply is appended as the result's final attempt and the returned policy passes it on.
    Unchanged: no budget known, observe mode, `on_exhausted: error` or `withhold` (one unit
    left or none: the whole reply is withheld, its valid calls too, docs/repair.md),
    several choices, or a fault of the whole reply (no call to drop).
    """
    if remaining is None or not policy.repair or policy.on_exhausted in ("error", "withhold"):
        return result, policy
    attempt = returned_attempt(result, policy.on_exhausted)
    if attempt.valid or len(attempt.replies) != 1 or result.outcome == "observed":
        return result, policy
    verdict, reply = attempt.verdict, attempt.reply
    if any(v.index is None for v in verdict.violations):
        return result, policy
    invalid = sorted({v.index for v in verdict.violations if v.index is not None})
    allowed = max(0, remaining - 1)
    if len(invalid) <= allowed:
        return result, policy
    dropped = set(invalid[allowed:])  # allowed >= 1 here: at least one call is kept
    kept = tuple(c for i, c in enumerate(reply.tool_calls) if i not in dropped)
    trimmed = Reply(content=reply.content, tool_calls=kept, finish_reason=reply.finish_reason)
    final = Attempt(attempt.number, "fix", attempt.completion, (trimmed,),
                    (validate_reply(trimmed, rules),), 0.0,
                    (*attempt.fixes, OVER_BUDGET_WITHHELD), lifted=attempt.lifted)
    trimmed_result = LadderResult([*result.attempts, final], result.outcome,
                                  [*result.fallbacks, OVER_BUDGET_WITHHELD], result.failed_calls,
                                  result.unused, result.loop)
    return trimmed_result, replace(policy, on_exhausted="passthrough")
