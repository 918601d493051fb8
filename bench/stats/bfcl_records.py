"""What the BFCL bench keeps per case. Nothing here does I/O.

One `CaseRecord` per (model, precision, arm, BFCL case), written to `cases.jsonl` once
BFCL's own checker has scored the case. The statistics and the report read only these.
It lives beside the statistics, not in bench.bfcl, so that bench.stats and bench.report
never import the harness that produces it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from bench.fault_tally import InjectedTally

# off: observe; on: the repair ladder; on+loop: the ladder and the loop guard (issue 32).
BfclArm = Literal["off", "on", "on+loop", "on+stop"]
BFCL_ARMS: tuple[BfclArm, ...] = ("off", "on", "on+loop", "on+stop")
DEFAULT_ARMS: tuple[BfclArm, ...] = ("off", "on")  # on+loop by --arms (the multi-turn study)


class CaseRecord(BaseModel):
    model: str  # the model's name in cells.yaml
    family: str
    precision: str  # the cell's label, e.g. "Q4_K_M (as shipped)"
    reference: bool
    arm: BfclArm
    category: str  # a BFCL category, e.g. "simple_python"
    case_id: str  # BFCL's id, e.g. "simple_python_12"
    correct: bool  # BFCL's checker
    error_type: str | None = None  # the checker's error_type when wrong
    error: str = ""  # the checker's first error message, truncated
    inference_error: bool = False  # BFCL recorded "Error during inference" (a crash)
    result: Any = None  # the answer as BFCL's handler recorded it
    input_tokens: int = 0  # as the client saw them: reflexguard sums every attempt
    output_tokens: int = 0
    latency_s: float = 0.0
    requests: int = 0  # guarded requests (first attempts in reflexguard's events)
    first_attempt_channels: dict[str, int] = Field(default_factory=dict)
    unknown_tool_names: dict[str, int] = Field(default_factory=dict)
    outcomes: dict[str, int] = Field(default_factory=dict)
    extra_upstream_calls: int = 0  # re-asks, constrained retries and loop re-asks
    # The loop guard's repeated calls by what it did (observed, replaced, kept, stopped).
    repeated_calls: dict[str, int] = Field(default_factory=dict)
    simulated: bool = False  # produced behind a scripted fake upstream, not a model
    # The arm ran with the cell's first answers shared (bench/bfcl/shared_answers.py): its
    # first attempts were answered from the other arm's identical requests, so its latency
    # is not the model's, and it is no evidence of determinism.
    first_answers_shared: bool = False
    # Injected faults beside natural errors (an INJECTED-faults cell, bench/fault_tally.py;
    # zeros elsewhere, None in records from before fault injection).
    injected: InjectedTally | None = None

    @property
    def precision_key(self) -> str:
        return self.precision.split()[0]

    @property
    def cell(self) -> str:
        return f"{self.model}@{self.precision_key}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.cell, self.arm, self.case_id)
