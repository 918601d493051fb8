"""The streaming benchmark's arithmetic: quantiles, added over direct, ratio to the minimal
pass-through. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class RoundSamples(Protocol):
    """What one round of a streaming point measured (bench.overhead --stream's Samples,
    bench.capacity's Point)."""

    first_text_ms: list[float]
    hold_ms: list[float]
    streams: int
    errors: int
    cpu_s: float


def absorb(into: RoundSamples, other: RoundSamples) -> None:
    """Another round of the same point merged into `into`: samples pooled, counts and CPU
    summed (the one rule both streaming benches merge rounds by)."""
    into.first_text_ms += other.first_text_ms
    into.hold_ms += other.hold_ms
    into.streams += other.streams
    into.errors += other.errors
    into.cpu_s += other.cpu_s


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile (as bench.perf.load.Point's); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ratio(a: float, b: float) -> float:
    """a / b, NaN where b is not positive (an added cost at or under direct's)."""
    return a / b if b > 0 else math.nan


@dataclass(frozen=True)
class AddedRow:
    direct_p50: float
    minimal_p50: float  # added over direct
    guard_p50: float  # added over direct
    ratio: float  # the guard's added p50 over the minimal's
    minimal_p99: float
    guard_p99: float


def added_row(direct: list[float], minimal: list[float], guard: list[float]) -> AddedRow:
    """What the minimal pass-through and the guard add over direct, at p50 and p99."""
    d50, d99 = quantile(direct, 0.5), quantile(direct, 0.99)
    m50, g50 = quantile(minimal, 0.5) - d50, quantile(guard, 0.5) - d50
    return AddedRow(d50, m50, g50, ratio(g50, m50), quantile(minimal, 0.99) - d99,
                    quantile(guard, 0.99) - d99)
