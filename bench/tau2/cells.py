"""cells.yaml: which models, at which precisions, behind which endpoints, in which domains.

A cell is one model at one precision in one domain. Each precision names either an
`embedded` variant (started on this CPU) or an OpenAI-compatible `endpoint` (vLLM in
production). One precision per model is the `reference` the others are compared with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from bench.records import Cell

DOMAINS = ("mock", "retail", "telecom", "airline")


class Endpoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str
    api_key: str | None = None


class Precision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str
    reference: bool = False
    embedded: str | None = None  # an embedded variant: Q4_K_M, Q3_K_S, Q2_K
    # llama.cpp context for an embedded variant: telecom's solo prompt alone is ~10k tokens.
    n_ctx: int = 16384
    endpoint: Endpoint | None = None
    # TEST ONLY: no model; the simulated agent replays gold actions with these errors.
    simulated_errors: list[str] | None = None
    tool_call_format: Literal["openai", "content"] = "openai"
    constrained_retry: Literal["off", "tool_choice", "structured_outputs",
                               "response_format"] = "off"
    # Its reflexguard's `inject_faults` (bench/tau2/fault_cells.py): an INJECTED-faults variant.
    inject_faults: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Precision:
        sources = [self.embedded, self.endpoint, self.simulated_errors]
        if sum(s is not None for s in sources) != 1:
            raise ValueError(f"precision {self.label!r}: give exactly one of embedded, "
                             "endpoint, simulated_errors")
        return self


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    family: str
    precisions: list[Precision]

    @model_validator(mode="after")
    def _one_reference(self) -> ModelEntry:
        if sum(p.reference for p in self.precisions) != 1:
            raise ValueError(f"model {self.name!r}: mark exactly one precision reference: true")
        return self


class UserConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["scripted", "llm"] = "scripted"
    endpoint: Endpoint | None = None  # for kind: llm


class CellsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[ModelEntry]
    user: UserConfig = Field(default_factory=UserConfig)
    max_repairs: int = 2
    grounding_domains: list[str] = Field(default_factory=lambda: ["retail"])

    def cells(self, domains: list[str]) -> list[tuple[ModelEntry, Precision, Cell]]:
        out = []
        for entry in self.models:
            for precision in entry.precisions:
                for domain in domains:
                    out.append((entry, precision, Cell(
                        model=entry.name, family=entry.family, precision=precision.label,
                        reference=precision.reference, domain=domain)))
        return out


DEFAULT = CellsConfig(models=[ModelEntry(
    name="qwen2.5-coder-0.5b", family="qwen2.5-coder-0.5b-instruct",
    precisions=[
        Precision(label="Q4_K_M (as shipped)", reference=True, embedded="Q4_K_M",
                  tool_call_format="content", constrained_retry="response_format"),
        Precision(label="Q2_K (requantized from Q4_K_M)", embedded="Q2_K",
                  tool_call_format="content", constrained_retry="response_format"),
    ],
)])


def simulated_cells(errors: list[str]) -> CellsConfig:
    """TEST ONLY: a reference that makes no errors and a 'lower' one that makes `errors`."""
    return CellsConfig(models=[ModelEntry(
        name="simulated-agent", family="simulated (no model)",
        precisions=[
            Precision(label="reference (SIMULATED, no injected errors)", reference=True,
                      simulated_errors=[]),
            Precision(label=f"lower (SIMULATED, injected: {','.join(errors) or 'none'})",
                      simulated_errors=errors),
        ],
    )])


def load_cells(path: Path | None) -> CellsConfig:
    if path is None:
        return DEFAULT
    return CellsConfig.model_validate(yaml.safe_load(path.read_text()))
