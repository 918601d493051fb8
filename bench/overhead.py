"""`python -m bench.overhead`: what reflexguard adds to a valid, non-streamed tool call.

In one run it starts a fast fake upstream, the ~40-line minimal pass-through proxy and
reflexguard, each in its own process, and drives each target with an aiohttp load
client at several concurrencies, with the 8-tool and the 15-tool request. `--workers 1 2`
runs reflexguard with 1 and 2 workers against the minimal pass-through with 1 and 2
processes; `--margins` adds reflexguard with `margins` on. Figures are printed, never
asserted: the machine is shared and noisy, so only ratios measured in the same run mean
anything.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench.perf.dialect_workload import WORKLOADS
from bench.perf.listening import wait_listening
from bench.perf.load import Point, drive
from bench.perf.many_core_load import LoadProcesses
from bench.perf.processes import process
from bench.perf.workload import REQUEST_BYTES, TOOL_WORKLOADS
from reflexguard.ops.loopback import free_port

COPY = "rg-1w@copy"  # reflexguard imported from --against: an A/B in one run


@dataclass(frozen=True)
class Server:
    name: str  # minimal-2p, rg-1w, rg-1w+margins
    args: list[str]
    port: int
    env: dict[str, str] | None = None
    processes: int = 1


@dataclass(frozen=True)
class Target:
    name: str  # a server's name, or direct
    workload: str  # 8 / 15 (tools), or a dialect
    url: str
    server: int | None  # the process whose CPU, with its descendants', is counted
    body: bytes


def servers(args: argparse.Namespace, upstream: str, translated: bool) -> list[Server]:
    out = []
    for n in args.workers:
        port = free_port()
        out.append(Server(f"minimal-{n}p", ["-m", "bench.perf.minimal_proxy", "--upstream",
                                            upstream, "--port", str(port),
                                            "--processes", str(n)], port, processes=n))
    guard = ["-m", "reflexguard", "serve", "--upstream", upstream,
             *(["--upstream-dialects", "chat"] if translated else [])]
    for n in args.workers:
        port = free_port()
        # `--workers` only when asked for: the flag is issue 11's, and 1 is the default.
        workers = ["--workers", str(n)] if args.workers != [1] else []
        out.append(Server(f"rg-{n}w", [*guard, "--port", str(port), *workers], port,
                          processes=n))
    if args.against:
        # PYTHONSAFEPATH: without it `-m` puts the working directory, this tree, first.
        port = free_port()
        out.append(Server(COPY, [*guard, "--port", str(port)], port,
                          copy_environment(args.against)))
    if args.otel == "on":  # the environment form of `--otel on`, as margins below
        port = free_port()
        out.append(Server("rg-1w+otel", [*guard, "--port", str(port)], port,
                          {"REFLEXGUARD_OTEL": "on", **otel_environment(args.otel_sink)}))
        port = free_port()  # the operator's lever: the SDK's sampler, one trace in ten
        out.append(Server("rg-1w+otel10%", [*guard, "--port", str(port)], port,
                          {"REFLEXGUARD_OTEL": "on", **otel_environment(args.otel_sink),
                           "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                           "OTEL_TRACES_SAMPLER_ARG": "0.1"}))
    if args.margins:
        # The environment form of `--margins on`: it reaches the setting whether or not
        # this checkout's CLI has the flag yet.
        port = free_port()
        out.append(Server("rg-1w+margins", [*guard, "--port", str(port)], port,
                          {"REFLEXGUARD_MARGINS": "on"}))
        if args.against:  # the margins arm's own before/after, in the same run
            port = free_port()
            out.append(Server(f"{COPY}+margins", [*guard, "--port", str(port)], port,
                              {**copy_environment(args.against),
                               "REFLEXGUARD_MARGINS": "on"}))
    return out


def copy_environment(against: Path) -> dict[str, str]:
    """The environment of the copy imported from --against: that tree first, then any path
    this run was given (where the dependencies' wheels may lie, as on a machine with no
    registry); PYTHONSAFEPATH, or `-m` would put the working directory, this tree, first."""
    return {"PYTHONSAFEPATH": "1", "PYTHONPATH": os.pathsep.join(
        [str(against), *filter(None, [os.environ.get("PYTHONPATH")])])}


def otel_environment(sink: int) -> dict[str, str]:
    """The standard variables, pointed at the sink; the SDK's default batching."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink}",
            "OTEL_SERVICE_NAME": "reflexguard-bench"}


def run(targets: list[Target], concurrencies: list[int], requests: int,
        rounds: int, load: LoadProcesses | None = None,
        duration: float = 0.0) -> dict[tuple[str, str, int], Point]:
    results: dict[tuple[str, str, int], Point] = {}
    per_round = max(1, requests // rounds)
    for concurrency in concurrencies:
        for _ in range(rounds):
            for t in targets:
                point = (load.drive(t.url, t.body, concurrency, duration, per_round, t.server)
                         if load else  # --load-processes K: many cores (issue 23)
                         asyncio.run(drive(t.url, concurrency, per_round, t.server, t.body)))
                key = (t.name, t.workload, concurrency)
                earlier = results.get(key)
                results[key] = earlier.merge(point) if earlier else point
        for t in targets:
            point = results[t.name, t.workload, concurrency]
            cpu = ("-" if point.cpu_ms_per_request is None
                   else f"{point.cpu_ms_per_request:.3f}")
            print(f"{t.name:<14} {t.workload:>9} {concurrency:>4} {point.quantile(0.5):>8.2f} "
                  f"{point.quantile(0.99):>8.2f} {point.rps:>8.0f} {cpu:>10} "
                  f"{point.errors:>6}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="per target and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 50, 200])
    parser.add_argument("--rounds", type=int, default=5,
                        help="targets alternate in rounds, so drifting machine load hits all")
    parser.add_argument("--tools", nargs="+", choices=sorted(TOOL_WORKLOADS),
                        default=["8", "15"],
                        help="the chat request's tool list: 8 tools (~3 KB) or 15 (~12 KB); "
                        "8+h: 8 tools after 10 valid historical calls (issue 22)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1],
                        help="reflexguard worker counts, each against the minimal "
                        "pass-through with as many processes (issue 11)")
    parser.add_argument("--margins", action="store_true",
                        help="also reflexguard with margins on (logprobs asked upstream)")
    parser.add_argument("--otel", choices=["off", "on"], default="off",
                        help="on: also reflexguard with OpenTelemetry on, exporting to a "
                        "local OTLP sink, as rg-1w+otel (issue 21)")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help=f"also reflexguard imported from DIR (a directory holding a copy "
                        f"of an earlier reflexguard/ package), 1 worker, as {COPY!r}: "
                        "before/after in one run")
    parser.add_argument("--dialect", choices=sorted(WORKLOADS), default="chat",
                        help="the route and wire format measured (issue 10)")
    parser.add_argument("--translated", action="store_true",
                        help="with --dialect messages|responses: reflexguard translates to "
                        "a chat-only upstream (--upstream-dialects chat)")
    parser.add_argument("--inprocess", action="store_true",
                        help="reflexguard.guard(openai client) against the bare client")
    parser.add_argument("--litellm", action="store_true",
                        help="LiteLLM proxy with the reflexguard guardrail against without it")
    parser.add_argument("--stream", action="store_true",
                        help="streamed answers instead: first text byte and a held call's "
                        "hold, each dialect (--dialect to pick one), against direct and the "
                        "minimal pass-through (issue 23)")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="with --stream: the fake upstream's pause between SSE events")
    parser.add_argument("--load-processes", type=int, default=1, metavar="K",
                        help="K load-client processes sharing each point, each timed for "
                        "--duration seconds: for a many-core machine (issue 23)")
    parser.add_argument("--upstream-processes", type=int, default=1, metavar="U",
                        help="the fast upstream as U processes on one port")
    parser.add_argument("--duration", type=float, default=5.0,
                        help="with --load-processes: seconds per point and round, at most "
                        "--requests/--rounds requests")
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="also write every point (p50, p99, req/s, CPU, errors) to FILE")
    args = parser.parse_args()
    if args.stream:
        from bench.perf.stream_bench import measure

        picked = [args.dialect] if "--dialect" in sys.argv else ["chat", "messages",
                                                                     "responses"]
        measure(args.requests, args.rounds, args.concurrency, picked, args.gap_ms,
                args.against)
        return
    if args.inprocess or args.litellm:
        from bench.perf.doors import measure_doors

        measure_doors(args.inprocess, args.litellm, args.requests, args.rounds)
        return
    args.workers = sorted(set(args.workers))
    route, dialect_body, _ = WORKLOADS[args.dialect]
    translated = args.translated and args.dialect != "chat"
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    print(f"reflexguard overhead benchmark: valid non-streamed tool calls, {args.requests} "
          f"requests per point, {args.rounds} rounds, {os.cpu_count()} cores")
    print("upstream: a fast fake (fixed simulated answer), so every figure is proxy cost")
    print(f"the load client and the fake upstream share the same {os.cpu_count()} cores "
          "with the servers measured: a second worker's gain is bounded by that")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with ExitStack() as stack:
        stack.enter_context(process(["-m", "bench.perf.fast_upstream", "--port",
                                     str(upstream_port), "--processes",
                                     str(args.upstream_processes)], upstream_port))
        wait_listening(upstream_port, args.upstream_processes)
        if args.otel == "on":
            args.otel_sink = free_port()
            stack.enter_context(process(["-m", "bench.perf.otlp_sink", "--port",
                                         str(args.otel_sink)], args.otel_sink))
        started = {s.name: (s, stack.enter_context(process(s.args, s.port, s.env)))
                   for s in servers(args, upstream, translated)}
        for server, _ in started.values():
            wait_listening(server.port, server.processes)
        if args.dialect == "chat":
            workloads = {w: (route, TOOL_WORKLOADS[w][1], route, TOOL_WORKLOADS[w][1])
                         for w in args.tools}
        else:  # translated: direct and minimal carry the chat request the upstream serves
            base = ("chat/completions", REQUEST_BYTES) if translated else (route, dialect_body)
            workloads = {args.dialect: (route, dialect_body, *base)}
        print(f"dialect: {args.dialect}{' (translated to chat)' if translated else ''}; "
              f"request bytes: " + ", ".join(f"{w}: {len(b)}" for w, (_, b, _, _)
                                             in workloads.items()))
        targets = []
        for workload, (rg_route, rg_body, base_route, base_body) in workloads.items():
            targets.append(Target("direct", workload, f"{upstream}/{base_route}", None,
                                  base_body))
            for name, (server, child) in started.items():
                guard = name.startswith("rg-")
                path = rg_route if guard else base_route
                targets.append(Target(name, workload, f"http://127.0.0.1:{server.port}/v1/{path}",
                                      child.pid, rg_body if guard else base_body))
        print(f"\n{'target':<14} {'workload':>9} {'c':>4} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'req/s':>8} {'cpu ms/req':>10} {'errors':>6}")
        load = None
        if args.load_processes > 1:
            load = LoadProcesses(args.load_processes, Path(os.environ.get(
                "BENCH_LOAD_LOG", "/tmp/bench-load.err")))
            stack.callback(load.close)
            print(f"load client: {args.load_processes} processes; upstream: "
                  f"{args.upstream_processes} processes; {args.duration} s a point and round")
        results = run(targets, args.concurrency, args.requests, args.rounds, load,
                      args.duration)
        if load is not None and len(args.workers) > 1:
            from bench.perf.many_core_report import summary, write_json

            table = summary(results, list(workloads), args.concurrency, args.workers)
            if args.json:
                write_json(args.json, results, args.workers, table)
    from bench.perf.overhead_report import report

    report(results, list(workloads), args.concurrency, args.workers, args.margins,
           COPY if args.against else None)
    if args.otel == "on":
        from bench.perf.otel_report import otel_report

        otel_report(results, list(workloads), args.concurrency, COPY if args.against else None)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
