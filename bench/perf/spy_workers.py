"""Where an N-worker server's CPU per request goes, server against server (issue 23).

`python -m bench.perf.spy_workers --workers 8 --seconds 12 --rounds 2 --out DIR
[--variant NAME=ENV ...]` starts the fast upstream, the N-process minimal pass-through and
`reflexguard serve --workers N` (plus one more reflexguard per `--variant`, whose
environment adds the NAME=ENV pairs, e.g. `shm=TMPDIR=/dev/shm`), all at once, and drives
each in turn with the multi-process load client (bench.perf.many_core_load), in rounds.
Per point it prints req/s and, summed over the server's processes from /proc, the user and
system CPU, voluntary and involuntary context switches and minor faults per request. In the
first round, where py-spy is on PATH, one worker of the minimal and of plain reflexguard is
sampled (non-blocking) to DIR/<name>.txt (py-spy's raw format: one folded stack a line),
and where `perf` is on PATH, `perf stat` reads that worker's cycles and instructions.
Figures go to stdout; nothing is asserted.

`python -m bench.perf.spy_workers --read FILE=CPU_MS ...` reads such samples back: each
sample charged to its innermost frame (non-blocking samples can catch a coroutine chain
half-switched, so only the leaf is trusted), grouped by where that frame's code lives, and
scaled to microseconds per request by the CPU per request the run printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

from bench.perf.listening import wait_listening
from bench.perf.load import TICKS
from bench.perf.many_core_load import LoadProcesses
from bench.perf.processes import process
from bench.perf.workload import TOOL_WORKLOADS
from reflexguard.ops.loopback import free_port


def descendants(root: int) -> list[int]:
    """`root` and every live process below it, by /proc's parent links."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def counters(pid: int) -> dict[str, int]:
    """user and system ticks, context switches and minor faults of one process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {"user": int(fields[11]), "sys": int(fields[12]), "minflt": int(fields[7])}
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches"):
            out["vcs"] = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches"):
            out["ivcs"] = int(line.split()[1])
    return out


def total(pids: list[int]) -> dict[str, int]:
    sums: dict[str, int] = {}
    for pid in pids:
        for key, value in counters(pid).items():
            sums[key] = sums.get(key, 0) + value
    return sums


def workers_of(root: int, guard: bool) -> list[int]:
    pids = descendants(root)
    if not guard:
        return pids
    workers = [pid for pid in pids if b"reflexguard.cli.worker" in
               Path(f"/proc/{pid}/cmdline").read_bytes()]
    return workers or [root]  # `--workers 1` serves in the one process


def where(frame: str) -> str:
    """The group of a py-spy frame `name (path:line)` by its path. Pure."""
    path = frame.rsplit(" (", 1)[-1]
    server, loop = "aiohttp server and common", "asyncio loop and transports"
    groups = (("reflexguard/cli/", "reflexguard's worker entry"),
              ("reflexguard/", "reflexguard's own code"),
              ("bench/", "the minimal's handler"),
              ("aiohttp/client", "aiohttp client"), ("aiohttp/connector", "aiohttp client"),
              ("aiohttp/", server), ("aiosignal/", server),
              ("asyncio/", loop), ("selectors", loop),
              ("prometheus_client/", "prometheus_client"))
    for prefix, group in groups:
        if path.startswith(prefix):
            return group
    return "other"


def read(spec: str) -> None:
    """Print one raw py-spy file's leaf groups, in microseconds per request."""
    name, _, cpu = spec.rpartition("=")
    shares: dict[str, int] = {}
    samples = 0
    for line in Path(name).read_text().splitlines():
        stack, _, tally = line.rpartition(" ")
        if not stack:
            continue
        group = where(stack.split(";")[-1])
        shares[group] = shares.get(group, 0) + int(tally)
        samples += int(tally)
    print(f"{name}: {samples} samples, {cpu} ms CPU per request")
    for group, count in sorted(shares.items(), key=lambda item: -item[1]):
        print(f"  {count / samples:6.1%} {count / samples * float(cpu) * 1000:7.1f} us  {group}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load-processes", type=int, default=6)
    parser.add_argument("--upstream-processes", type=int, default=4)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=K=V,K=V")
    parser.add_argument("--out", type=Path, default=Path("/tmp/spy-workers"))
    parser.add_argument("--read", nargs="+", metavar="FILE=CPU_MS", help="read samples back")
    args = parser.parse_args()
    if args.read:
        for spec in args.read:
            read(spec)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    n = args.workers
    body = TOOL_WORKLOADS["15"][1]
    up = free_port()
    upstream = f"http://127.0.0.1:{up}/v1"
    servers: list[tuple[str, list[str], dict[str, str] | None, bool]] = [
        (f"minimal-{n}p", ["-m", "bench.perf.minimal_proxy", "--upstream", upstream,
                           "--processes", str(n)], None, False),
        (f"rg-{n}w", ["-m", "reflexguard", "serve", "--upstream", upstream,
                      "--workers", str(n)], None, True)]
    for variant in args.variant:
        label, _, pairs = variant.partition("=")
        extra = dict(pair.split("=", 1) for pair in pairs.split(","))
        servers.append((f"rg-{n}w-{label}", ["-m", "reflexguard", "serve", "--upstream",
                                            upstream, "--workers", str(n)], extra, True))
    spy, perf = shutil.which("py-spy"), shutil.which("perf")
    print(f"{os.cpu_count()} cores; py-spy {spy}; perf {perf}; load {os.getloadavg()}",
          flush=True)
    with ExitStack() as stack:
        stack.enter_context(process(["-m", "bench.perf.fast_upstream", "--port", str(up),
                                     "--processes", str(args.upstream_processes)], up))
        wait_listening(up, args.upstream_processes)
        running = []
        for name, command, env, guard in servers:
            port = free_port()
            child = stack.enter_context(process([*command, "--port", str(port)], port, env))
            wait_listening(port, n)
            running.append((name, port, child, guard))
        for found in sorted(Path(os.environ.get("TMPDIR", "/tmp")).glob("reflexguard-metrics-*")):
            print(f"metrics dir {found}: {len(list(found.iterdir()))} files", flush=True)
        load = LoadProcesses(args.load_processes, args.out / "load.err")
        stack.callback(load.close)
        for round_ in range(args.rounds):
            for name, port, child, guard in running:
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                pids = workers_of(child.pid, guard)
                tools: list[subprocess.Popen[bytes]] = []
                if round_ == 0 and spy and name in (f"minimal-{n}p", f"rg-{n}w"):
                    tools.append(subprocess.Popen(
                        [spy, "record", "--pid", str(pids[-1]), "--nonblocking", "--rate",
                         "400", "--duration", str(int(args.seconds)), "--format", "raw",
                         "-o", str(args.out / f"{name}.txt")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                if round_ == 0 and perf:
                    tools.append(subprocess.Popen(
                        [perf, "stat", "-e", "cycles,instructions,cache-misses,"
                         "context-switches,page-faults", "-p", str(pids[-1]), "-o",
                         str(args.out / f"{name}.perf"), "--", "sleep",
                         str(args.seconds)], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL))
                before = total(pids)
                began = time.monotonic()
                point = load.drive(url, body, args.concurrency, args.seconds, 10**9, None)
                after = total(pids)
                for tool in tools:
                    try:
                        tool.wait(args.seconds + 20)
                    except subprocess.TimeoutExpired:
                        tool.kill()
                count = max(1, len(point.latencies))
                per = {k: (after.get(k, 0) - v) for k, v in before.items()}
                print(f"round {round_} {name:<16} {point.rps:8.0f} req/s  user "
                      f"{per['user'] / TICKS * 1000 / count:.3f} sys "
                      f"{per['sys'] / TICKS * 1000 / count:.3f} ms/req  vcs "
                      f"{per.get('vcs', 0) / count:.2f} ivcs {per.get('ivcs', 0) / count:.2f} "
                      f"minflt {per['minflt'] / count:.3f} /req  errors {point.errors}  "
                      f"{time.monotonic() - began:.1f} s", flush=True)
    print(f"load after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
