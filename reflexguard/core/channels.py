"""The error channels every tool call is sorted into. Nothing here does I/O."""

from enum import StrEnum


class Channel(StrEnum):
    OK = "ok"
    UNKNOWN_TOOL = "unknown_tool"
    MALFORMED_ARGS = "malformed_args"
    SCHEMA_VIOLATION = "schema_violation"
    VANISHED_CALL = "vanished_call"
    CHOICE_VIOLATION = "choice_violation"
    EMPTY_REPLY = "empty_reply"
    UNGROUNDED_ENTITY = "ungrounded_entity"
    # Our fault, never the model's: the validator itself failed on this call (a pattern
    # past its backtracking limit, an exception inside the library). Never "valid", never
    # re-asked for its own sake, never withheld: the call goes on as the model wrote it,
    # counted and logged (docs/channels.md, issue 30).
    CHECK_FAULT = "check_fault"
    # Not a reply's call: a historical call in the request, repaired before forwarding
    # (reflexguard/core/history.py). Counted by kind, never among a reply's channels.
    HISTORY_REPAIRED = "history_repaired"
    # Not an invalid call: a valid call the conversation already made, with the same
    # arguments and the same result, at least `loop_repeats` times since the user last
    # spoke (reflexguard/core/loops.py). Counted by the loop guard, never among a reply's
    # error channels, never against the agent's error budget.
    REPEATED_CALL = "repeated_call"


# The model's error channels: a reply's tool call can fall into these, OK aside. Not
# CHECK_FAULT, which is ours (the bench never blames the model for it).
ERROR_CHANNELS: tuple[Channel, ...] = tuple(
    c for c in Channel if c not in (Channel.OK, Channel.HISTORY_REPAIRED,
                                    Channel.REPEATED_CALL, Channel.CHECK_FAULT))
