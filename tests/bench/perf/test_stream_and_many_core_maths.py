"""The pure arithmetic of the streaming and many-core benchmarks (issue 23)."""

from __future__ import annotations

import math

from bench.perf.capacity import Point as CapacityPoint
from bench.perf.load import Point
from bench.perf.many_core_load import busy_share, split
from bench.perf.many_core_report import added_p50, rows
from bench.perf.stream_bench import Samples
from bench.perf.stream_stats import absorb, added_row, quantile
from bench.perf.stream_upstream import CALL_ARGUMENTS, TEXT, rendered, split_events


def test_added_row_subtracts_direct_and_divides_by_the_minimal() -> None:
    row = added_row([1.0, 1.0, 1.0], [1.5, 1.5, 3.0], [2.0, 2.0, 9.0])
    assert (row.direct_p50, row.minimal_p50, row.guard_p50) == (1.0, 0.5, 1.0)
    assert row.ratio == 2.0
    assert (row.minimal_p99, row.guard_p99) == (2.0, 8.0)


def test_a_minimal_no_slower_than_direct_gives_no_ratio() -> None:
    assert math.isnan(added_row([2.0], [1.0], [3.0]).ratio)
    assert math.isnan(quantile([], 0.5))


def test_connections_are_spread_over_the_load_processes_none_empty() -> None:
    assert split(256, 6) == [43, 43, 43, 43, 42, 42]
    assert split(1, 6) == [1]
    assert sum(split(50, 8)) == 50


def test_busy_share_reads_the_idle_ticks() -> None:
    assert busy_share((1000, 800), (2000, 1050)) == 0.75
    assert math.isnan(busy_share((5, 5), (5, 5)))


def _point(rps: float, latency_ms: float = 1.0, cpu: float = 0.3) -> Point:
    return Point([latency_ms / 1000] * int(rps), 1.0, 0, cpu)


def test_many_core_rows_ratio_and_scaling() -> None:
    results = {("minimal-1p", "15", 64): _point(100), ("rg-1w", "15", 64): _point(80),
               ("minimal-2p", "15", 64): _point(190), ("rg-2w", "15", 64): _point(150)}
    first, second = rows(results, "15", 64, [1, 2])
    assert first["ratio"] == 0.8 and first["rg_scaling"] == 1.0
    assert second["minimal_scaling"] == 1.9 and second["rg_scaling"] == 150 / 80
    assert second["ratio"] == 150 / 190


def test_c1_added_p50_is_over_direct() -> None:
    results = {("direct", "15", 1): _point(10, 0.2), ("minimal-1p", "15", 1): _point(10, 0.7),
               ("rg-1w", "15", 1): _point(10, 1.2)}
    added = added_p50(results, "15", [1])
    assert added is not None
    assert math.isclose(added["minimal"], 0.5) and math.isclose(added["rg"], 1.0)


def test_the_fake_streams_carry_the_answers_whole_in_many_events() -> None:
    streams = rendered()
    for dialect in ("chat", "messages", "responses"):
        call = b"".join(streams["call", dialect])
        assert len(streams["call", dialect]) > 100  # realistic chunking: ~16-char deltas
        assert split_events(call) == streams["call", dialect]
        assert len(streams["text", dialect]) > 200
    assert 2000 <= len(CALL_ARGUMENTS) <= 2200 and len(TEXT) == 2048


def test_rounds_merge_by_one_rule_in_both_streaming_benches() -> None:
    samples = Samples([1.0], [2.0], errors=1, cpu_s=0.5, streams=1)
    absorb(samples, Samples([3.0], [4.0], errors=2, cpu_s=0.25, streams=2))
    assert (samples.first_text_ms, samples.hold_ms, samples.errors, samples.cpu_s,
            samples.streams) == ([1.0, 3.0], [2.0, 4.0], 3, 0.75, 3)
    point = CapacityPoint("rg-1w", "rg", 1, 50, "text", [1.0], [2.0], 1, 0, 0.5, 0.2)
    point.absorb(CapacityPoint("rg-1w", "rg", 1, 50, "text", [5.0], [6.0], 2, 1, 0.5, 0.1))
    assert (point.first_text_ms, point.hold_ms, point.streams, point.errors, point.cpu_s,
            point.busy) == ([1.0, 5.0], [2.0, 6.0], 3, 1, 1.0, 0.2)
