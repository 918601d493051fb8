"""The worst event-loop block over the hostile-schema corpus, before and after (issue 18).

    python -m bench.perf.hostile_schemas --against /tmp/old-h1

with `git worktree add /tmp/old-h1 20cb60d`. Each tree's reflexguard runs as its own
process (the copy imported from `--against`, as bench/overhead.py does) behind one fake
upstream that answers every route natively with the corpus's hostile answer
(bench/perf/hostile_corpus.py). A thread probes /healthz every 5 ms; a case's block
is the longest probe inside it. A case still unanswered after `--timeout` seconds counts
as wedged (at least the timeout); that server is killed and started again for the next.
This prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from bench.perf.hostile_corpus import ROUTES, Hostile, corpus, reply_body, request_body
from bench.perf.processes import process
from reflexguard.ops.loopback import free_port


class FakeUpstream:
    """Answers each route with the current case's native reply, on its own loop."""

    def __init__(self) -> None:
        self.current: Hostile | None = None
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()

    async def _answer(self, request: web.Request) -> web.Response:
        await request.read()
        route = next((r for r, path in ROUTES.items() if request.path.endswith(path[3:])),
                     "chat")
        assert self.current is not None
        return web.Response(body=reply_body(route, self.current),
                            content_type="application/json")


@dataclass
class Prober:
    """GET /healthz in a loop from a thread: (start, end) of every probe."""

    port: int
    probes: list[tuple[float, float]] = field(default_factory=list)
    inflight: float | None = None
    stopped: bool = False

    def run(self) -> None:
        while not self.stopped:
            began = self.inflight = time.perf_counter()
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
                connection.request("GET", "/healthz")
                connection.getresponse().read()
                connection.close()
            except (OSError, http.client.HTTPException):
                time.sleep(0.05)  # restarting: not a block of the loop
                self.inflight = None
                continue
            self.probes.append((began, time.perf_counter()))
            self.inflight = None
            time.sleep(0.005)

    def worst_during(self, start: float, end: float) -> float:
        worst = 0.0
        for began, ended in reversed(self.probes):
            if ended < start:
                break
            if began <= end:
                worst = max(worst, ended - max(began, start))
        if self.inflight is not None and self.inflight <= end:
            worst = max(worst, time.perf_counter() - max(self.inflight, start))
        return worst


def send(port: int, path: str, body: bytes, timeout: float) -> int | None:
    """The status, or None when no answer came within `timeout`."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    except (TimeoutError, OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def measure(name: str, env: dict[str, str] | None, fake: FakeUpstream,
            cases: list[tuple[Hostile, str]], timeout: float) -> dict[tuple[str, str], str]:
    port = free_port()
    prober = Prober(port)
    threading.Thread(target=prober.run, daemon=True).start()
    args = ["-m", "reflexguard", "serve", "--upstream", f"http://127.0.0.1:{fake.port}/v1",
            "--port", str(port), "--max-repairs", "1"]
    results: dict[tuple[str, str], str] = {}
    left = list(cases)
    while left:
        with process(args, port, env):
            while left:
                hostile, route = left.pop(0)
                fake.current = hostile
                body = request_body(route, hostile)
                started = time.perf_counter()
                status = send(port, ROUTES[route], body, timeout)
                ended = time.perf_counter()
                worst = prober.worst_during(started, ended)
                cell = (f"wedged >{timeout:.0f} s" if status is None
                        else f"{worst * 1000:8.1f} ms  {status}")
                results[(hostile.name, route)] = cell
                print(f"  {name:7} {hostile.name:28} {route:9} {cell}", flush=True)
                if status is None:
                    break  # kill this server; the next case gets a fresh one
    prober.stopped = True
    return results


def worst_of(cells: dict[tuple[str, str], str]) -> str:
    wedged = [key for key, cell in cells.items() if cell.startswith("wedged")]
    if wedged:
        return f"wedged ({len(wedged)} of {len(cells)} cases)"
    return f"{max(float(cell.split()[0]) for cell in cells.values()):.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="an earlier tree (e.g. a worktree of 20cb60d), run as 'before'")
    parser.add_argument("--routes", default=",".join(ROUTES),
                        help="comma list of chat, messages, responses")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="seconds before an unanswered case counts as wedged")
    args = parser.parse_args()
    routes = [r for r in args.routes.split(",") if r]
    cases = [(hostile, route) for hostile in corpus() for route in routes]
    fake = FakeUpstream()
    arms: list[tuple[str, dict[str, str] | None]] = [("after", None)]
    if args.against:  # PYTHONSAFEPATH: without it `-m` puts this tree first on the path
        arms.insert(0, ("before", {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(args.against)}))
    results = {name: measure(name, env, fake, cases, args.timeout) for name, env in arms}
    print(f"\n{'case':28} {'route':9} " + " ".join(f"{name:>22}" for name, _ in arms))
    for hostile, route in cases:
        print(f"{hostile.name:28} {route:9} "
              + " ".join(f"{results[name][(hostile.name, route)]:>22}" for name, _ in arms))
    print("\nworst event-loop block over the corpus: "
          + "; ".join(f"{name} {worst_of(results[name])}" for name, _ in arms))
    elsewhere = {h.name: h.blocked_by for h in corpus() if h.blocked_by}
    if elsewhere:
        kept = {name: {k: v for k, v in results[name].items() if k[0] not in elsewhere}
                for name, _ in arms}
        print("without the cases blocked outside the schema's cost ("
              + "; ".join(f"{n}: {why}" for n, why in elsewhere.items()) + "): "
              + "; ".join(f"{name} {worst_of(kept[name])}" for name, _ in arms))


if __name__ == "__main__":
    main()
