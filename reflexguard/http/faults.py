"""Fault injection at the edge (`inject_faults`, testing only): one request's faults.

An I/O edge only by the telemetry it records. The first answer (and, with `reasks=on`,
every re-ask's) is read in full, then damaged by the core's pure `inject` before the
ladder sees it, so validation, repair and what the agent receives are exactly what they
would be had the model itself written the damaged calls. Each fault is counted
(`reflexguard_injected_faults_total{channel}`) and marked on its call in the events file;
a fault drawn for a call it cannot be put on is a counted, logged fallback.
"""

from __future__ import annotations

import dataclasses
import hashlib

from reflexguard.core.attempts import Attempt
from reflexguard.core.channels import Channel
from reflexguard.core.errors import BadRequest
from reflexguard.core.fault_spec import FAULT_CHANNELS, FaultSpec
from reflexguard.core.inject import UnkeyableRequest, fallback_key, inject, request_key
from reflexguard.core.model import JsonObject
from reflexguard.core.validate import CallRules, validate_reply
from reflexguard.ops.telemetry import Telemetry

# One request's seed, over the spec's: a bench's trials (or a test) draw different faults
# for the same conversation. Read only while injection is on; a client cannot turn it on.
FAULT_SEED_HEADER = "x-reflexguard-fault-seed"
# The Messages wire format carries a call's input as a parsed JSON object: a model behind
# it cannot send arguments that are not JSON, so that fault is not put on its calls.
EXPRESSIBLE: dict[str, frozenset[Channel]] = {
    "messages": frozenset(FAULT_CHANNELS) - {Channel.MALFORMED_ARGS}}


def fault_seed(header: str | None) -> int | None:
    """The seed a request's header gives; None without one. Raises BadRequest."""
    if header is None:
        return None
    text = header.strip()
    if not text.isdigit() or len(text) > 18:
        raise BadRequest(f"{FAULT_SEED_HEADER} must be a non-negative integer, not "
                         f"{text[:40]!r}", param=FAULT_SEED_HEADER)
    return int(text)


class RequestFaults:
    """The faults of one guarded request: its first answer's, and its re-asks' if asked."""

    def __init__(self, spec: FaultSpec, rules: CallRules, telemetry: Telemetry,
                 request_id: str, dialect: str, seed: int | None = None) -> None:
        self.spec = spec
        self.rules = rules
        self.telemetry = telemetry
        self.request_id = request_id
        self.dialect = dialect
        self.seed = seed
        self.expressible = EXPRESSIBLE.get(dialect)

    def first(self, body: JsonObject, attempt: Attempt) -> Attempt:
        """The first answer as the damaged model would have written it."""
        return self._damaged(body, attempt)

    def reask(self, body: JsonObject, attempt: Attempt) -> Attempt:
        """A re-ask's answer: damaged too with `reasks=on`, else as the model wrote it."""
        return self._damaged(body, attempt) if self.spec.reasks else attempt

    def _damaged(self, body: JsonObject, attempt: Attempt) -> Attempt:
        if not attempt.replies:
            return attempt
        # Only the first choice: the one every guarded route writes back (n > 1 is passed
        # on unrepaired, and its other choices as the model wrote them).
        try:
            key = request_key(body, self.rules.toolset.digest)
        except UnkeyableRequest:  # still the same key for the same conversation
            key = fallback_key(body, self.rules.toolset.digest)
            self.telemetry.fallback("fault_key_from_repr", request_id=self.request_id)
        if attempt.kind != "initial":  # a re-ask's stream differs from its request's first
            key = hashlib.sha256(b"%d\0" % attempt.number + key).digest()
        reply, injected, skipped = inject(attempt.replies[0], self.rules.toolset, self.spec,
                                          key, self.seed, self.expressible)
        for miss in skipped:
            self.telemetry.injected_skipped.labels(str(miss.channel)).inc()
            self.telemetry.fallback("fault_not_injected", request_id=self.request_id,
                                    channel=str(miss.channel), reason=miss.reason,
                                    attempt=attempt.number)
        if not injected:
            return attempt
        for fault in injected:
            self.telemetry.injected_faults.labels(str(fault.channel)).inc()
        replies = (reply, *attempt.replies[1:])
        verdicts = (validate_reply(reply, self.rules), *attempt.verdicts[1:])
        return dataclasses.replace(attempt, replies=replies, verdicts=verdicts,
                                   injected=injected)
