"""`python -m bench.perf.profile`: where reflexguard's CPU goes on the guarded fast path.

Starts the fast fake upstream and `reflexguard serve`, drives it at c=50 with the chosen
request, samples the server with py-spy (the bench extra pins it) and prints the hottest
reflexguard frames, inclusive. How the 15-tool costs were found (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

from bench.perf.load import drive
from bench.perf.processes import process
from bench.perf.workload import TOOL_WORKLOADS
from reflexguard.ops.loopback import free_port

PY_SPY = Path(sys.executable).with_name("py-spy")


def hottest(collapsed: Path, top: int) -> list[tuple[float, str]]:
    """(share of samples, frame) for the frames most often on the stack, reflexguard's."""
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for frame in set(stack.split(";")):
            inclusive[frame] += int(count)
    frames = [(n / total, f) for f, n in inclusive.most_common() if "reflexguard/" in f
              and "__main__" not in f and "/cli/" not in f]
    return frames[:top]


def self_time(collapsed: Path, top: int) -> list[tuple[float, str]]:
    """(share of samples, frame) for the frames most often on top of the stack, anyone's:
    where the CPU itself goes, aiohttp and the event loop included."""
    leaf: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        leaf[stack.split(";")[-1]] += int(count)
    return [(n / total, f) for f, n in leaf.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", choices=sorted(TOOL_WORKLOADS), default="15")
    parser.add_argument("--seconds", type=int, default=12)
    parser.add_argument("--margins", action="store_true", help="reflexguard with margins on")
    parser.add_argument("--otel", type=float, metavar="RATIO",
                        help="reflexguard with OpenTelemetry on, exporting to a local OTLP "
                        "sink, one trace in 1/RATIO kept (1: every trace) (issue 34)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--self", action="store_true",
                        help="also the frames on top of the stack, any module's")
    parser.add_argument("--minimal", action="store_true",
                        help="sample the minimal pass-through instead, for comparison")
    args = parser.parse_args()
    up, guard_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up}/v1"
    env = {"REFLEXGUARD_MARGINS": "on"} if args.margins else {}
    sink = free_port()
    if args.otel is not None:
        env.update({"REFLEXGUARD_OTEL": "on", "OTEL_EXPORTER_OTLP_ENDPOINT":
                    f"http://127.0.0.1:{sink}", "OTEL_TRACES_SAMPLER":
                    "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": str(args.otel)})
    server = (["-m", "bench.perf.minimal_proxy", "--upstream", upstream, "--port",
               str(guard_port)] if args.minimal else
              ["-m", "reflexguard", "serve", "--upstream", upstream, "--port", str(guard_port)])
    with tempfile.TemporaryDirectory() as tmp, \
            process(["-m", "bench.perf.fast_upstream", "--port", str(up)], up), \
            (process(["-m", "bench.perf.otlp_sink", "--port", str(sink)], sink)
             if args.otel is not None else nullcontext()), \
            process(server, guard_port, env or None) as guard:
        out = Path(tmp) / "stacks.txt"
        spy = subprocess.Popen([str(PY_SPY), "record", "--pid", str(guard.pid), "--duration",
                                str(args.seconds), "--rate", "200", "--format", "raw",
                                "--nonblocking", "-o", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # py-spy attached
        point = asyncio.run(drive(f"http://127.0.0.1:{guard_port}/v1/chat/completions", 50,
                                  200 * args.seconds, guard.pid, TOOL_WORKLOADS[args.tools][1]))
        if spy.wait() != 0 or not out.exists():
            sys.exit("py-spy failed (it needs ptrace: root, or CAP_SYS_PTRACE)")
        otel = "" if args.otel is None else f", otel on (ratio {args.otel})"
        print(f"{'minimal pass-through, ' if args.minimal else ''}"
              f"{args.tools} tools{', margins on' if args.margins else ''}{otel}: "
              f"{point.rps:.0f} req/s at c=50, {point.cpu_ms_per_request:.3f} ms CPU/request")
        print("share of samples with the frame on the stack (inclusive):")
        for share, frame in hottest(out, args.top):
            print(f"{share:6.1%}  {frame}")
        if args.self:
            print("share of samples with the frame on top of the stack (self):")
            for share, frame in self_time(out, args.top):
                print(f"{share:6.1%}  {frame}")


if __name__ == "__main__":
    main()
