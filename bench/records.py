"""What the bench keeps per episode. Nothing here does I/O.

One `EpisodeRecord` per (cell, arm, task, trial), written to `episodes.jsonl` as soon as
the episode ends. Analysis and the report read only these records.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from bench.fault_tally import InjectedTally

Arm = Literal["off", "on", "on+budget", "on+stop"]
# `on+budget`: repair on, and the agent tells reflexguard its error budget K.
ARMS: tuple[Arm, ...] = ("off", "on", "on+budget", "on+stop")
SUCCESS_TOLERANCE = 1e-6  # tau2.metrics.agent_metrics.is_successful

# Where a failed environment call went wrong, as tau2's environment saw it.
ENV_CHANNELS = ("unknown_tool", "wrong_side_tool", "malformed_args", "argument_error",
                "domain_error")


class Cell(BaseModel):
    """A model at one precision in one domain."""

    model: str  # the model's name in cells.yaml, e.g. "qwen2.5-coder-0.5b"
    family: str
    precision: str  # the label, e.g. "Q4_K_M (as shipped)"
    reference: bool  # the precision others are compared with
    domain: str

    @property
    def key(self) -> str:
        return f"{self.model}@{self.precision_key}/{self.domain}"

    @property
    def precision_key(self) -> str:
        return self.precision.split()[0]


class ToolCallRecord(BaseModel):
    """One call the agent made, and what the environment answered."""

    turn: int  # index of the agent turn (0-based) that made it
    name: str
    error: bool
    channel: str | None = None  # one of ENV_CHANNELS when error
    content: str = ""  # the environment's answer, truncated
    # The call carried a fault reflexguard injected (bench/fault_tally.py): not the model's.
    injected: bool = False


class ProxyRecord(BaseModel):
    """reflexguard's events for the episode, joined on the session id."""

    first_attempt_channels: dict[str, int] = Field(default_factory=dict)
    unknown_tool_names: dict[str, int] = Field(default_factory=dict)
    repairs_attempted: int = 0
    repairs_succeeded: int = 0
    extra_upstream_calls: int = 0
    # Every outcome reflexguard recorded for the episode's requests, e.g. "repeated_failure".
    outcomes: dict[str, int] = Field(default_factory=dict)
    # The events file these came from, relative to the run folder (for `reflexguard screen`).
    events_file: str | None = None
    # Injected faults beside natural errors (an INJECTED-faults cell; zeros elsewhere).
    injected: InjectedTally | None = None


class EpisodeRecord(BaseModel):
    cell: Cell
    arm: Arm
    task_id: str
    trial: int
    seed: int
    max_errors: int | None = None  # tau2's K for this episode (None: records before it was kept)
    simulated: bool = False  # produced by the test-only simulated agent
    unscored: bool = False  # the task's reward checks nothing the agent did
    termination_reason: str
    reward: float
    infrastructure_error: str | None = None
    agent_turns: int
    calls: list[ToolCallRecord] = Field(default_factory=list)
    proxy: ProxyRecord = Field(default_factory=ProxyRecord)
    duration_s: float = 0.0
    user: str = ""
    judge: str = ""
    tau2: dict[str, Any] = Field(default_factory=dict)  # tau2's own SimulationRun

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.cell.key, self.arm, self.task_id, self.trial)

    @property
    def error_count(self) -> int:
        """Error tool messages: what tau2 charges against the budget."""
        return sum(1 for c in self.calls if c.error)

    @property
    def success(self) -> bool:
        # tau2's own `is_successful` tolerance: rewards are products of floats.
        return abs(self.reward - 1.0) <= SUCCESS_TOLERANCE and self.infrastructure_error is None
