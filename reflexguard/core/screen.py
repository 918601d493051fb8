"""The risk screen: from a reference precision's margins, the error rate a lower precision
is predicted to have, per tool and per channel. Pure: the CLI reads the files.

A decision is one tool call of an agent's own (initial) attempt, as the events file
records it with `margins: on`; re-asks answer our repair prompt, not the agent, and fixes
rewrite calls without new tokens, so neither is a decision of the model's. A decision's
predicted error rate is the calibration bin's `error_rate` at its reference name margin
(docs/screen.md); a group's is the mean over its decisions whose margin is known.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

SCHEMA = "reflexguard.margin_calibration/1"
NO_NAME = "(no name)"


class CalibrationError(ValueError):
    """A calibration file that does not follow the schema; the message is one line."""


@dataclass(frozen=True)
class Bin:
    lo: float  # inclusive; -inf for the first bin
    hi: float  # exclusive; +inf for the last bin
    n: int
    flip_rate: float
    error_rate: float


@dataclass(frozen=True)
class Calibration:
    model: str
    reference: str
    candidate: str
    simulated: bool
    source: str
    error_definition: str
    thin_threshold: float
    bins: tuple[Bin, ...]

    def bin_for(self, margin: float) -> Bin | None:
        return bin_for(self.bins, margin)


def bin_for(bins: Iterable[Bin], margin: float) -> Bin | None:
    """The bin holding `margin` (lo inclusive, hi exclusive), or None."""
    for candidate in bins:
        if candidate.lo <= margin < candidate.hi:
            return candidate
    return None


def _number(value: object, what: str, default: float | None = None) -> float:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise CalibrationError(f"{what} must be a number")
    return float(value)


def _rate(value: object, what: str) -> float:
    rate = _number(value, what)
    if not 0.0 <= rate <= 1.0:
        raise CalibrationError(f"{what} must be between 0 and 1")
    return rate


def parse_calibration(data: object) -> Calibration:
    """The calibration file's JSON, checked; raises CalibrationError."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise CalibrationError(f"not a margin calibration (schema must be {SCHEMA!r})")
    raw_bins = data.get("bins")
    if not isinstance(raw_bins, list) or not raw_bins:
        raise CalibrationError("calibration has no bins")
    bins: list[Bin] = []
    for number, raw in enumerate(raw_bins):
        if not isinstance(raw, dict):
            raise CalibrationError(f"bins[{number}] is not an object")
        n = raw.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise CalibrationError(f"bins[{number}].n must be a count")
        bins.append(Bin(lo=_number(raw.get("lo"), f"bins[{number}].lo", -math.inf),
                        hi=_number(raw.get("hi"), f"bins[{number}].hi", math.inf), n=n,
                        flip_rate=_rate(raw.get("flip_rate"), f"bins[{number}].flip_rate"),
                        error_rate=_rate(raw.get("error_rate"), f"bins[{number}].error_rate")))
    bins.sort(key=lambda b: b.lo)
    if any(b.lo >= b.hi for b in bins):
        raise CalibrationError("every bin needs lo < hi")
    return Calibration(
        model=str(data.get("model", "?")), reference=str(data.get("reference", "?")),
        candidate=str(data.get("candidate", "?")), simulated=data.get("simulated") is not False,
        source=str(data.get("source", "?")),
        error_definition=str(data.get("error_definition", "not stated")),
        thin_threshold=_number(data.get("thin_threshold"), "thin_threshold"),
        bins=tuple(bins))


@dataclass(frozen=True)
class Decision:
    tool: str
    channel: str
    name_margin: float | None
    has_margins: bool  # the event carried margin keys at all (margins were on)


def decisions_of(events: Iterable[dict[str, Any]]) -> list[Decision]:
    """The agent's own tool calls: the calls of every initial attempt."""
    decisions: list[Decision] = []
    for event in events:
        if event.get("event") != "attempt" or event.get("kind") != "initial":
            continue
        calls = event.get("calls")
        for call in calls if isinstance(calls, list) else ():
            if not isinstance(call, dict):
                continue
            margin = call.get("name_margin")
            if isinstance(margin, bool) or not isinstance(margin, int | float) \
                    or not math.isfinite(margin):
                margin = None
            name = call.get("name")
            decisions.append(Decision(
                tool=name if isinstance(name, str) and name else NO_NAME,
                channel=str(call.get("channel", "?")),
                name_margin=None if margin is None else float(margin),
                has_margins="name_margin" in call))
    return decisions


@dataclass(frozen=True)
class Row:
    key: str
    decisions: int
    measured: int  # decisions whose name margin is known
    thin: int
    reference_errors: int  # decisions invalid at the reference already
    predicted_error_rate: float | None
    predicted_flip_rate: float | None
    candidate_decisions: int | None = None
    candidate_errors: int | None = None

    @property
    def thin_share(self) -> float | None:
        return self.thin / self.measured if self.measured else None

    @property
    def candidate_error_rate(self) -> float | None:
        if not self.candidate_decisions or self.candidate_errors is None:
            return None
        return self.candidate_errors / self.candidate_decisions


@dataclass(frozen=True)
class Screen:
    threshold: float
    calibration: Calibration
    overall: Row
    by_tool: tuple[Row, ...]
    by_channel: tuple[Row, ...]
    has_candidate: bool


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _row(key: str, group: list[Decision], calibration: Calibration, threshold: float,
         candidate: list[Decision] | None) -> Row:
    bins = [calibration.bin_for(d.name_margin) for d in group if d.name_margin is not None]
    known = [b for b in bins if b is not None]
    measured = [d for d in group if d.name_margin is not None]
    return Row(
        key=key, decisions=len(group), measured=len(measured),
        thin=sum(1 for d in measured if d.name_margin is not None and d.name_margin < threshold),
        reference_errors=sum(1 for d in group if d.channel != "ok"),
        predicted_error_rate=_mean([b.error_rate for b in known]),
        predicted_flip_rate=_mean([b.flip_rate for b in known]),
        candidate_decisions=None if candidate is None else len(candidate),
        candidate_errors=None if candidate is None else
        sum(1 for d in candidate if d.channel != "ok"))


def _grouped(reference: list[Decision], candidate: list[Decision] | None,
             key: Callable[[Decision], str], calibration: Calibration,
             threshold: float) -> tuple[Row, ...]:
    keys = sorted({key(d) for d in reference} | {key(d) for d in candidate or []})
    rows = []
    for value in keys:
        theirs = None if candidate is None else [d for d in candidate if key(d) == value]
        rows.append(_row(value, [d for d in reference if key(d) == value], calibration,
                         threshold, theirs))
    return tuple(sorted(rows, key=lambda r: (-r.decisions, r.key)))


def screen(reference: list[Decision], calibration: Calibration, threshold: float,
           candidate: list[Decision] | None = None) -> Screen:
    """Per tool and per channel: decisions, thin share, predicted and (with a candidate
    run) observed error rates. In the per-channel table a candidate row counts the
    candidate's calls in that channel, so its 'errors' are that channel's calls."""
    per_channel: tuple[Row, ...] = _grouped(reference, candidate, lambda d: d.channel,
                                            calibration, threshold)
    if candidate is not None:
        per_channel = tuple(replace(row, candidate_decisions=len(candidate), candidate_errors=sum(
            1 for d in candidate if d.channel == row.key)) for row in per_channel)
    return Screen(
        threshold=threshold, calibration=calibration,
        overall=_row("all", reference, calibration, threshold, candidate),
        by_tool=_grouped(reference, candidate, lambda d: d.tool, calibration, threshold),
        by_channel=per_channel, has_candidate=candidate is not None)
