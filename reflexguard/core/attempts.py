"""The records of a ladder's attempts: one answer read and judged, and the ladder's result.
Nothing here does I/O.

Frozen records the ladder writes and everything above it reads (the agent's answer in
core/choice.py, telemetry, the events file); they import nothing of the ladder's, so
what reads them never imports the ladder to do it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from reflexguard.core.channels import Channel
from reflexguard.core.completion import choices_of, lift_text_calls, reply_of, unwrap_abstention
from reflexguard.core.loops import LoopReport
from reflexguard.core.model import JsonObject, Reply, Verdict
from reflexguard.core.repair import ABSTAIN_KEY
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
# The ladder ran and no attempt was valid: the agent gets what `on_exhausted` says.
GAVE_UP: frozenset[Outcome] = frozenset({"exhausted", "repeated_failure"})


class UpstreamFailure(Exception):
    """Raised by a `send` coroutine when the upstream did not produce a completion."""



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



def only_check_faults(attempt: Attempt) -> bool:
    """Every violation of the attempt is a fault of our validator's (Channel.CHECK_FAULT)."""
    violations = [v for verdict in attempt.verdicts for v in verdict.violations]
    return bool(violations) and all(v.channel is Channel.CHECK_FAULT for v in violations)


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
