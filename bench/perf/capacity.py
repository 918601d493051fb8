"""The capacity benchmark's runner (issue 34): paced streams at high concurrency, reflexguard
against the minimal pass-through, one worker and N, in one run on one machine.

In one run: the streaming fake upstream (bench.perf.stream_upstream, simulated: SSE paced
like a model server, `gap_ms` between events) as U processes on one port, the minimal
pass-through as N processes and `reflexguard serve --workers N` for each N, and K load
processes (bench.perf.capacity_load) that keep c streams open. Each point is one target,
one concurrency and one scene, targets alternating within a round so that drifting load
hits all. Each point records the first text byte and a held call's hold of every stream
that started after the warm-up, the target's own CPU (the process tree's, from /proc) and
how busy the whole machine was. Printed and written as JSON; never asserted.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from bench.perf.capacity_load import LoadResult, LoadSpec, run
from bench.perf.listening import wait_listening
from bench.perf.load import tree_cpu_seconds
from bench.perf.many_core_load import busy_share, machine_ticks, split
from bench.perf.processes import process
from bench.perf.stream_bench import template
from bench.perf.stream_stats import absorb, quantile
from bench.perf.stream_upstream import ROUTES
from reflexguard.ops.loopback import free_port

START_LEAD_S = 1.0  # load processes start together this long after being dispatched


@dataclass(frozen=True)
class Options:
    workers: list[int]
    concurrency: list[int]
    scenes: list[str]
    gap_ms: float
    warm_s: float
    duration_s: float
    rounds: int
    load_processes: int
    upstream_processes: int
    dialect: str = "chat"


@dataclass(frozen=True)
class Target:
    name: str  # direct, minimal-Np, rg-Nw
    kind: str  # direct, minimal, reflexguard
    workers: int
    url: str
    pid: int  # the process tree whose CPU is counted (direct: the upstream's)


@dataclass
class Point:
    target: str
    kind: str
    workers: int
    c: int
    scene: str
    first_text_ms: list[float]
    hold_ms: list[float]
    streams: int
    errors: int
    cpu_s: float
    busy: float  # the whole machine's busy share over the point

    def absorb(self, other: Point) -> None:
        """Another round of the same target, concurrency and scene, merged into this one."""
        absorb(self, other)
        self.busy = max(self.busy, other.busy)

    def summary(self) -> dict[str, object]:
        row = {k: v for k, v in asdict(self).items() if k not in ("first_text_ms", "hold_ms")}
        for what in ("first_text_ms", "hold_ms"):
            values = getattr(self, what)
            row[f"{what}_p50"] = quantile(values, 0.5)
            row[f"{what}_p99"] = quantile(values, 0.99)
            row[f"{what}_n"] = len(values)
        row["cpu_ms_per_stream"] = 1e3 * self.cpu_s / self.streams if self.streams else None
        return row


def read_stamps(folder: Path) -> dict[str, int]:
    """Every `TAG NS` line the upstream processes wrote, the files emptied after."""
    stamps: dict[str, int] = {}
    for path in folder.glob("*.txt"):
        with path.open("r+") as stamp_file:
            for line in stamp_file:
                tag, _, ns = line.partition(" ")
                if ns.strip().isdigit():
                    stamps[tag] = int(ns)
            stamp_file.truncate(0)  # the writer's O_APPEND handle goes on at the new end
    return stamps


def drive(pool: multiprocessing.pool.Pool, target: Target, options: Options, c: int,
          scene: str, stamps: Path, serial: int) -> Point:
    raw = template(options.dialect, scene)
    start = time.monotonic_ns() + int(START_LEAD_S * 1e9)
    specs = [LoadSpec(target.url, options.dialect, raw, share, start, options.warm_s,
                      options.duration_s, (serial * 100 + k) * 1_000_000)
             for k, share in enumerate(split(c, options.load_processes))]
    read_stamps(stamps)  # whatever an earlier point left
    cpu, ticks = tree_cpu_seconds(target.pid), machine_ticks()
    results: list[LoadResult] = pool.map(run, specs)
    cpu, busy = tree_cpu_seconds(target.pid) - cpu, busy_share(ticks, machine_ticks())
    time.sleep(0.2)  # the upstream notes a stream's end just after its last write
    upstream_last = read_stamps(stamps)
    firsts = [ms for r in results for ms in r.first_text_ms]
    lasts = {tag: last for r in results for tag, last in r.lasts.items()}
    holds = [(last - upstream_last[tag]) / 1e6 for tag, last in lasts.items()
             if tag in upstream_last]
    errors = sum(r.errors for r in results) + len(lasts) - len(holds)
    return Point(target.name, target.kind, target.workers, c, scene, firsts, holds,
                 sum(r.streams for r in results), errors, cpu, busy)


def measure(options: Options, saved: Path | None = None) -> list[Point]:
    """Every point of the grid, rounds merged per (target, c, scene); with `saved`, all
    points so far written there after each one (a run cut off by its time limit keeps
    what it measured: `bench.capacity --report FILE` reads it)."""
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}"
    route = ROUTES[options.dialect]
    merged: dict[tuple[str, int, str], Point] = {}
    with ExitStack() as stack:
        stamps = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rg-cap-")))
        pid = stack.enter_context(process(
            ["-m", "bench.perf.stream_upstream", "--port", str(upstream_port), "--gap-ms",
             str(options.gap_ms), "--processes", str(options.upstream_processes),
             "--stamps-dir", str(stamps)], upstream_port)).pid
        wait_listening(upstream_port, options.upstream_processes)
        targets = [Target("direct", "direct", 0, upstream + route, pid)]
        for n in options.workers:
            for kind, argv in (
                    ("minimal", ["-m", "bench.perf.minimal_proxy", "--processes", str(n)]),
                    ("reflexguard", ["-m", "reflexguard", "serve",
                                     *(["--workers", str(n)] if n > 1 else [])])):
                port = free_port()
                child = stack.enter_context(process(
                    [*argv, "--upstream", f"{upstream}/v1", "--port", str(port)], port))
                wait_listening(port, n)
                name = f"minimal-{n}p" if kind == "minimal" else f"rg-{n}w"
                targets.append(Target(name, kind, n, f"http://127.0.0.1:{port}{route}",
                                      child.pid))
        pool = stack.enter_context(
            multiprocessing.get_context("spawn").Pool(options.load_processes))
        serial = 0
        for round_no in range(options.rounds):
            for c in options.concurrency:
                for scene in options.scenes:
                    for target in targets:
                        serial += 1
                        point = drive(pool, target, options, c, scene, stamps, serial)
                        print(f"round {round_no + 1}: {target.name:<12} c={c:<5} {scene:<4} "
                              f"streams {point.streams:>6} errors {point.errors:>4} "
                              f"busy {point.busy:.0%}", flush=True)
                        key = (target.name, c, scene)
                        if key in merged:
                            merged[key].absorb(point)
                        else:
                            merged[key] = point
                        if saved is not None:
                            write_json(list(merged.values()), options, saved)
    return list(merged.values())


def write_json(points: list[Point], options: Options, path: Path) -> None:
    """The points as JSON: each one's summary and its raw samples (what a report needs)."""
    path.write_bytes(orjson.dumps({"options": asdict(options),
                                   "points": [{**p.summary(), "first_text_ms": p.first_text_ms,
                                               "hold_ms": p.hold_ms} for p in points]}))


def read_json(path: Path) -> tuple[dict[str, object], list[Point]]:
    """What write_json wrote: the options, and the points with their samples."""
    data = orjson.loads(path.read_bytes())
    fields = [f for f in Point.__dataclass_fields__]
    return data["options"], [Point(**{f: row[f] for f in fields}) for row in data["points"]]
