"""A multi-process load client for `bench.overhead --load-processes K` (issue 23): on a
many-core machine one aiohttp process cannot keep 8 workers busy, so K persistent processes
share each measurement.

Ported from the design of ../shared/perf/scale_many.py, with the pitfalls it met:
- a single aiohttp server's listen backlog (128) drops a burst of a few hundred connects, so
  each load process first opens its connections with one untimed request each, and only
  then do all start, at one monotonic instant the parent names;
- a load process can stall (seen against the direct target): every answer is awaited with a
  deadline, a silent process gets SIGUSR1 (faulthandler's stacks to its stderr), is killed by
  pid with the others, and the measurement is retried once with fresh processes;
- the machine has a ceiling: each point prints how busy the whole machine was (/proc/stat),
  and how many cores the load client took, so a point at the ceiling can be read as such.
The load processes run on uvloop when it imports (the servers under test never do).
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.perf.load import TICKS, Point, tree_cpu_seconds

PREPARE_TIMEOUT = 20.0  # seconds for every load process to open its connections
GRACE = 25.0  # seconds past a point's duration before a load process counts as stalled
CUT_AFTER = 5.0  # seconds past a point's duration after which a hung request is cut


def machine_ticks() -> tuple[int, int]:
    """(all, idle+iowait) jiffies of the whole machine, from /proc/stat's first line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The machine's busy share between two machine_ticks() readings. Pure."""
    total, idle = after[0] - before[0], after[1] - before[1]
    return 1 - idle / total if total > 0 else float("nan")


def split(concurrency: int, processes: int) -> list[int]:
    """`concurrency` connections over at most `processes` load processes, as evenly as
    possible, none empty. Pure."""
    used = max(1, min(concurrency, processes))
    return [concurrency // used + (i < concurrency % used) for i in range(used)]


# -- the load process -------------------------------------------------------------------------


def _emit(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def _measure(url: str, body: bytes, conc: int, duration: float, count: int,
                   ) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    errors = sent = 0
    headers = {"Content-Type": "application/json"}
    timeout = aiohttp.ClientTimeout(total=10)  # healthy requests take milliseconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc + 8),
                                     timeout=timeout) as session:
        async def once() -> bool:
            try:
                async with session.post(url, data=body, headers=headers) as answer:
                    await answer.read()
                    return answer.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        began = time.monotonic()
        prepared = await asyncio.gather(*(once() for _ in range(conc)))  # untimed: connect
        _emit({"ready": True, "prepare_s": round(time.monotonic() - began, 3),
               "prepare_errors": sum(not ok for ok in prepared)})
        go = json.loads(sys.stdin.readline() or "{}")  # blocks the loop on purpose: idle
        await asyncio.sleep(max(0.0, go["start_at"] - time.monotonic()))
        start = time.monotonic()
        stop_at = start + duration

        async def worker() -> None:
            nonlocal errors, sent
            while sent < count and time.monotonic() < stop_at:
                sent += 1
                began = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=headers) as answer:
                        await answer.read()
                        ok = answer.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                if ok:
                    latencies.append(time.perf_counter() - began)
                else:
                    errors += 1

        tasks = [asyncio.ensure_future(worker()) for _ in range(conc)]
        # Bounded: a request that hangs past the point's end is cut and counted an error.
        _, hung = await asyncio.wait(tasks, timeout=duration + CUT_AFTER)
        for task in hung:
            task.cancel()
        end = time.monotonic()
        print(f"load {os.getpid()}: {len(latencies)} answers, {errors} errors, {len(hung)} "
              f"hung, {end - start:.2f} s", file=sys.stderr, flush=True)
        # The latencies go by file: a line of a few hundred KB through the pipe was once
        # seen lost past its first 256 KiB (a 16-core run), small lines never.
        where = Path(f"/tmp/bench-load-{os.getpid()}.json")
        where.write_text(json.dumps(latencies))
        return {"start": start, "end": end, "errors": errors + len(hung),
                "latencies_file": str(where)}


def worker_main() -> None:
    """One command a line on stdin, one answer a line on stdout, until EOF or quit."""
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent asks when stuck
    try:
        import uvloop
        factory: Any = uvloop.new_event_loop
    except ImportError:
        factory = None
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            return
        began = time.monotonic()
        with asyncio.Runner(loop_factory=factory) as runner:
            result = runner.run(_measure(command["url"], command["body"].encode(),
                                         command["conc"], command["duration"],
                                         command["count"]))
        print(f"load {os.getpid()}: answering after {time.monotonic() - began:.2f} s",
              file=sys.stderr, flush=True)
        _emit(result)


# -- the parent ---------------------------------------------------------------------------------


class Stalled(RuntimeError):
    pass


class LoadProcesses:
    """K persistent load processes; `drive` measures one point with some of them."""

    def __init__(self, processes: int, log: Path) -> None:
        self.count = processes
        self.log = log
        self.children: list[subprocess.Popen[bytes]] = []
        self.pending: dict[int, bytes] = {}
        self.respawns = 0
        self._spawn()

    def _spawn(self) -> None:
        err = self.log.open("ab")
        self.children = [subprocess.Popen(
            [sys.executable, "-m", "bench.perf.many_core_load"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=err, start_new_session=True)
            for _ in range(self.count)]
        err.close()
        self.pending = {c.pid: b"" for c in self.children}

    def pids(self) -> list[int]:
        return [c.pid for c in self.children]

    def _send(self, children: list[subprocess.Popen[bytes]], value: dict[str, Any]) -> None:
        data = (json.dumps(value) + "\n").encode()
        for child in children:
            try:
                assert child.stdin is not None
                child.stdin.write(data)
                child.stdin.flush()
            except OSError as error:
                raise Stalled(f"load process {child.pid}: {error!r}") from None

    def _answers(self, children: list[subprocess.Popen[bytes]], limit: float,
                 what: str) -> list[dict[str, Any]]:
        got: dict[int, dict[str, Any]] = {}
        by_fd = {c.stdout.fileno(): c for c in children if c.stdout is not None}
        deadline = time.monotonic() + limit
        while len(got) < len(children) and time.monotonic() < deadline:
            waiting = [fd for fd, c in by_fd.items() if c.pid not in got]
            readable, _, _ = select.select(waiting, [], [], 0.5)
            for fd in readable:
                child = by_fd[fd]
                chunk = os.read(fd, 1 << 22)
                if not chunk:
                    raise Stalled(f"load process {child.pid} ended ({what})")
                self.pending[child.pid] += chunk
                if b"\n" in self.pending[child.pid]:
                    line, self.pending[child.pid] = self.pending[child.pid].split(b"\n", 1)
                    got[child.pid] = json.loads(line)
        if len(got) < len(children):
            silent = [f"{c.pid} ({len(self.pending[c.pid])} bytes read)" for c in children
                      if c.pid not in got]
            raise Stalled(f"load processes {silent} gave no {what} within {limit:.0f} s")
        return [got[c.pid] for c in children]

    def respawn(self) -> None:
        """Stacks of the stuck to the log, every load process killed by pid, fresh ones."""
        self.respawns += 1
        for child in self.children:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGUSR1)
        time.sleep(1.0)
        for child in self.children:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
            child.wait(5)
        self._spawn()

    def _once(self, url: str, body: bytes, concurrency: int, duration: float, count: int,
              server: int | None) -> Point:
        shares = split(concurrency, self.count)
        children = self.children[:len(shares)]
        for child, conc in zip(children, shares, strict=True):
            self._send([child], {"url": url, "body": body.decode(), "conc": conc,
                                 "duration": duration,
                                 "count": max(1, count * conc // concurrency)})
        self._answers(children, PREPARE_TIMEOUT, "ready")
        cpu = tree_cpu_seconds(server) if server else 0.0
        client = sum(_ticks(pid) for pid in self.pids())
        machine = machine_ticks()
        self._send(children, {"start_at": time.monotonic() + 0.2})
        results = self._answers(children, duration + GRACE, "result")
        busy = busy_share(machine, machine_ticks())
        client = sum(_ticks(pid) for pid in self.pids()) - client
        seconds = max(1e-9, max(r["end"] for r in results) - min(r["start"] for r in results))
        latencies = [x for r in results for x in _read_latencies(r["latencies_file"])]
        cpu_ms = ((tree_cpu_seconds(server) - cpu) * 1000 / max(1, len(latencies))
                  if server else None)
        print(f"    machine busy {busy:.2f}, load client {client / TICKS / seconds:.1f} cores, "
              f"{len(shares)} load processes", flush=True)
        return Point(latencies, seconds, sum(r["errors"] for r in results), cpu_ms)

    def drive(self, url: str, body: bytes, concurrency: int, duration: float, count: int,
              server: int | None) -> Point:
        for attempt in (1, 2):  # a stalled load process costs one retry, not the run
            try:
                return self._once(url, body, concurrency, duration, count, server)
            except Stalled as error:
                print(f"    {error}; fresh load processes (attempt {attempt})", flush=True)
                self.respawn()
        raise RuntimeError(f"the load client stalled twice against {url}")

    def close(self) -> None:
        for child in self.children:
            try:
                self._send([child], {"quit": True})
                child.wait(5)
            except (Stalled, subprocess.TimeoutExpired):
                child.kill()


def _read_latencies(name: str) -> list[float]:
    path = Path(name)
    values: list[float] = json.loads(path.read_text())
    path.unlink()
    return values


def _ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


if __name__ == "__main__":
    worker_main()
