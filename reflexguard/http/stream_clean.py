"""The clean-answer shortcut for guarded streams (issue 23). An I/O edge only by the
telemetry it records.

Once a stream's first answer is read whole, an answer whose every call is ok
(validate.clean_tool_calls, which tests/core/test_clean_calls.py holds to validate_reply)
is settled as the ladder settles it ("clean") without reading it into verdicts or running
the ladder, and recorded as the non-streamed shortcuts record it. What the agent receives
is then written by the same code as after the full reading (tests/http/test_stream_writes.py
compares the two), so the shortcut changes the time after the upstream's last byte only.
"""

from __future__ import annotations

from reflexguard.core.attempts import Attempt, LadderResult
from reflexguard.core.channels import Channel
from reflexguard.core.completion import choices_of, reply_of
from reflexguard.core.model import CallVerdict, JsonObject, Verdict
from reflexguard.core.validate import clean_tool_calls
from reflexguard.http.call import GuardedCall
from reflexguard.ops import tracing


def clean_first(call: GuardedCall, completion: JsonObject, seconds: float) -> LadderResult | None:
    """The settled result of a streamed first answer whose calls are all ok, recorded;
    None: read it in full. Margins and OpenTelemetry read the full reading's records, so
    with either on every answer is read in full (as the non-streamed shortcuts do)."""
    if call.margins.enabled or tracing.hooks.enabled or call.faults is not None:
        return None
    names = clean_tool_calls(completion, call.rules)
    if names is None or call.may_repeat(names):  # a repeat is for the loop guard to read
        return None
    replies = tuple(reply_of(choice) for choice in choices_of(completion))
    verdicts = tuple(Verdict(calls=tuple(
        CallVerdict(channel=Channel.OK, index=index, name=tool.name)
        for index, tool in enumerate(reply.tool_calls))) for reply in replies)
    first = Attempt(1, "initial", completion, replies, verdicts, seconds)
    call.guard.telemetry.clean_answer(names, call.request_id, call.session, call.chat.model,
                                      call.rules.toolset.digest, call.chat.stream,
                                      call.dialect, seconds, call.session_errors())
    call.finished(seconds, attempts=1, violations=0)
    return LadderResult([first], "clean")
