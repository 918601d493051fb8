"""What `inject_faults` asks for: a rate per channel, a seed, and whether re-asks are hit.

Nothing here does I/O. A spec is typed as a flag or a variable
(`unknown_tool=0.2,malformed_args=0.1,seed=7,reasks=on`) or written as a YAML mapping
with the same keys; `off` (or nothing) is no injection at all. Fault injection is for
testing (issue 33, docs/bench.md "Injected faults"): the damage is simulated, the repair
that follows it is real.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reflexguard.core.channels import Channel

# The channels a fault can be injected into, in the order a draw walks them (an injected
# call falls into at most one: the rates are shares of one uniform draw per call).
FAULT_CHANNELS: tuple[Channel, ...] = (
    Channel.UNKNOWN_TOOL, Channel.MALFORMED_ARGS, Channel.SCHEMA_VIOLATION)
OFF_WORDS = frozenset({"", "off", "none", "false", "no", "0"})
ON_WORDS = {"on": True, "true": True, "yes": True, "1": True,
            "off": False, "false": False, "no": False, "0": False}


class FaultSpec(BaseModel):
    """Rates are per tool call of an upstream answer: the chance that the call is damaged
    in that channel. They add up to at most 1 (one draw per call picks its channel)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    unknown_tool: float = Field(0.0, ge=0, le=1)
    malformed_args: float = Field(0.0, ge=0, le=1)
    schema_violation: float = Field(0.0, ge=0, le=1)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    # A damaged model errs on re-asks as well: on, re-asks' answers are damaged at the
    # same rates; off, only first answers are (the model then repairs at its own rate).
    reasks: bool = False

    @model_validator(mode="after")
    def _one_draw(self) -> FaultSpec:
        total = sum(rate for _, rate in self.rates)
        if total > 1.0 + 1e-9:
            raise ValueError(f"the rates add up to {total:g}: at most 1 (one draw per call)")
        return self

    @property
    def rates(self) -> tuple[tuple[Channel, float], ...]:
        return tuple((channel, float(getattr(self, channel.value))) for channel in FAULT_CHANNELS)

    @property
    def active(self) -> bool:
        return any(rate > 0 for _, rate in self.rates)

    def text(self) -> str:
        """The spec as the flag writes it, canonical: for logs, /healthz and records."""
        parts = [f"{channel.value}={rate:g}" for channel, rate in self.rates if rate > 0]
        parts += [f"seed={self.seed}", f"reasks={'on' if self.reasks else 'off'}"]
        return ",".join(parts)


class FaultSpecError(ValueError):
    """A spec that cannot be read: one line saying which part and why."""


def _pairs(text: str) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            key, sep, value = part.partition(":")
        key, value = key.strip().replace("-", "_"), value.strip()
        if not sep or not key or not value:
            raise FaultSpecError(f"{part!r} is not key=value (e.g. unknown_tool=0.2,seed=7)")
        if key in pairs:
            raise FaultSpecError(f"{key} is given twice")
        pairs[key] = value
    return pairs


def _typed(pairs: Mapping[str, Any]) -> dict[str, Any]:
    """Values as the spec's types; a typo'd key names its nearest known one."""
    known = set(FaultSpec.model_fields)
    typed: dict[str, Any] = {}
    for key, value in pairs.items():
        if key not in known:
            import difflib

            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise FaultSpecError(f"unknown key {key!r}{hint}; known: {', '.join(sorted(known))}")
        if key == "reasks" and isinstance(value, str):
            if value.lower() not in ON_WORDS:
                raise FaultSpecError(f"reasks must be on or off, not {value!r}")
            value = ON_WORDS[value.lower()]
        elif isinstance(value, str):
            try:
                value = int(value) if key == "seed" else float(value)
            except ValueError:
                raise FaultSpecError(f"{key} must be a number, not {value!r}") from None
        elif isinstance(value, bool) and key != "reasks":
            raise FaultSpecError(f"{key} must be a number, not {value!r}")
        typed[key] = value
    return typed


def parse_fault_spec(value: object) -> FaultSpec | None:
    """A spec from a flag's text, a YAML mapping, or a spec already; None for off.
    Raises FaultSpecError (one line) for anything else."""
    if value is None or isinstance(value, FaultSpec):
        return value
    if value is False:
        return None
    if isinstance(value, str):
        if value.strip().lower() in OFF_WORDS:
            return None
        pairs = _pairs(value)
    elif isinstance(value, Mapping):
        pairs = {str(k).replace("-", "_"): v for k, v in value.items()}
    else:
        raise FaultSpecError(f"must be text like unknown_tool=0.2,seed=7 or a mapping, "
                             f"not {type(value).__name__}")
    try:
        spec = FaultSpec(**_typed(pairs))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise FaultSpecError(f"{where + ': ' if where else ''}{message}") from None
    return spec  # all rates 0 stays on: nothing is damaged, but it is said (and read in full)
