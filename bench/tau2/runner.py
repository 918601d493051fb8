"""Running the cells: upstreams, a reflexguard per arm, tau2 episodes, saved at once.

This is the I/O shell of the bench. Episodes already in `episodes.jsonl` are skipped
with `--resume`; every finished episode is appended immediately.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError
from tau2.agent.llm_agent import LLMSoloAgent
from tau2.data_model.tasks import Task
from tau2.run import load_tasks
from tqdm import tqdm

from bench.record_store import RecordStore
from bench.records import Arm, Cell, EpisodeRecord
from bench.tau2.cells import CellsConfig, Precision
from bench.tau2.episode import EpisodeSpec, UserKind, run_episode
from bench.tau2.fault_cells import served_together
from bench.tau2.limits import CALL_TIMEOUT_S, EPISODE_TIMEOUT_S, MAX_TOKENS
from bench.tau2.proxy_host import ProxyHost
from reflexguard.core.budget import BUDGET_HEADER
from reflexguard.http.faults import FAULT_SEED_HEADER
from reflexguard.ops.config import Settings
from reflexguard.ops.events import Event, read_event

LOG = logging.getLogger("bench")
TASK_SETS = {"mock": "mock", "retail": "retail", "telecom": "telecom", "airline": "airline"}


class BenchError(Exception):
    """A user mistake in the bench's options: one line, exit 2."""


@dataclass
class RunOptions:
    out: Path
    arms: list[Arm]
    domains: list[str]
    tasks: int | None = None
    task_ids: list[str] | None = None
    trials: int = 1
    max_errors: int = 10
    concurrency: int = 1
    resume: bool = False
    seed: int = 300
    domain_tasks: dict[str, int] = field(default_factory=dict)  # per-domain task caps
    episode_timeout: float | None = EPISODE_TIMEOUT_S  # None: no wall-clock limit
    max_tokens: int = MAX_TOKENS
    model_threads: int | None = None  # embedded llama.cpp threads; None: every core
    margins: bool = False  # every proxy asks for logprobs, margins into its events (costly)


def select_tasks(domain: str, count: int | None, ids: list[str] | None) -> list[Task]:
    tasks: list[Task] = load_tasks(TASK_SETS[domain])
    if domain == "telecom":  # solo mode: only tasks with a ticket the agent can work from
        tasks = [t for t in tasks if LLMSoloAgent.check_valid_task(t)]
    if ids:
        by_id = {t.id: t for t in tasks}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise BenchError(f"unknown task id(s) in {domain}: {', '.join(missing)}")
        return [by_id[i] for i in ids]
    return tasks[:count] if count else tasks


@contextlib.contextmanager
def upstream_for(precision: Precision, threads: int | None = None) -> Iterator[
        tuple[str, str, str | None]]:
    """(base URL, model id, api key) of a precision's model server, running."""
    if precision.endpoint is not None:
        yield precision.endpoint.base_url, precision.endpoint.model, precision.endpoint.api_key
        return
    from reflexguard.embedded.child import model_server

    assert precision.embedded is not None
    with model_server(precision.embedded, n_ctx=precision.n_ctx, threads=threads) as server:
        yield server.base_url, f"embedded-{precision.embedded}", None


class EventsReader:
    """reflexguard's events for one session, read incrementally from its JSONL file.

    Each episode asks once; only lines appended since the last call are parsed, so a long
    run does not re-read the whole file per episode. Episodes may run in threads.
    """

    def __init__(self, path: Path, run_dir: Path | None = None,
                 skip_existing: bool = False) -> None:
        self.path = path
        # Recorded with each episode, relative to the run folder so the folder can move.
        self.relative = str(path.relative_to(run_dir)) if run_dir else str(path)
        self.skipped = 0  # lines that are not events this reader knows (a newer writer)
        # On --resume the file already holds the events of an interrupted episode whose
        # session id the rerun reuses: they belong to no record of this run.
        self._offset = path.stat().st_size if skip_existing and path.exists() else 0
        self._by_session: dict[str, list[Event]] = defaultdict(list)
        self._lock = threading.Lock()

    def __call__(self, session: str) -> list[Event]:
        with self._lock:
            if self.path.exists():
                with self.path.open("rb") as handle:
                    handle.seek(self._offset)
                    data = handle.read()
                complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
                self._offset += len(complete)
                for line in complete.splitlines():
                    try:
                        event = read_event(line)
                    except ValidationError:
                        # Another part of reflexguard may write event kinds this bench
                        # predates; losing one line must not stop a 20-minute run.
                        self.skipped += 1
                        continue
                    self._by_session[str(event.get("session"))].append(event)
            return list(self._by_session.get(session, []))


def agent_headers(spec: EpisodeSpec) -> dict[str, str]:
    """What the agent sends reflexguard: its session and, in the budget arm, its K.

    The budget travels as a header, as a production agent would send it, so the `on` and
    `on+budget` proxies are configured identically (docs/bench.md, "How the budget arm
    knows K").
    """
    headers = {"x-reflexguard-session": spec.session,
               # Read only by an injected-faults cell's reflexguard: each trial its own
               # faults, the same in every arm (bench/tau2/fault_cells.py).
               FAULT_SEED_HEADER: str(spec.seed)}
    if spec.arm == "on+budget":
        headers[BUDGET_HEADER] = str(spec.max_errors)
    return headers


def events_path(out: Path, cell: Cell, arm: Arm) -> Path:
    """One events file per cell and arm, inside the run folder."""
    return out / "events" / f"{cell.key.replace('/', '_')}-{arm}.jsonl"


def proxy_settings(config: CellsConfig, precision: Precision, cell: Cell, arm: Arm,
                   base_url: str, api_key: str | None, events: Path,
                   margins: bool = False) -> Settings:
    """The reflexguard serving one cell and arm. Margins are measured in every arm or none:
    they cost the upstream time, and time decides episode timeouts."""
    return Settings(
        upstream=base_url,
        upstream_api_key=SecretStr(api_key) if api_key else None,
        repair=arm != "off",
        max_repairs=config.max_repairs,
        loop_guard="stop" if arm == "on+stop" else "off",
        tool_call_format=precision.tool_call_format,
        constrained_retry=precision.constrained_retry,
        grounding=cell.domain in config.grounding_domains,
        margins=margins, inject_faults=precision.inject_faults,
        events=events, log_level="warning")


def _user_kind(domain: str, config: CellsConfig) -> UserKind:
    if domain == "telecom":
        return "solo"
    return "llm" if config.user.kind == "llm" else "scripted"


class Progress:
    def __init__(self, total: int, done: list[EpisodeRecord]) -> None:
        self.bar = tqdm(total=total, initial=len(done), unit="episode", desc="episodes")
        self.successes = sum(r.success for r in done)
        self.count = len(done)

    def update(self, record: EpisodeRecord) -> None:
        self.count += 1
        self.successes += record.success
        self.bar.set_postfix(success=f"{self.successes}/{self.count}", last=record.task_id)
        self.bar.update(1)


def _specs(config: CellsConfig, precision: Precision, cell: Cell, arm: Arm, options: RunOptions,
           llm: str | None, llm_args: dict[str, Any]) -> list[EpisodeSpec]:
    cap = options.domain_tasks.get(cell.domain, options.tasks)
    tasks = select_tasks(cell.domain, cap, options.task_ids)
    user_endpoint = config.user.endpoint
    specs = []
    for task in tasks:
        for trial in range(options.trials):
            spec = EpisodeSpec(
                cell=cell, arm=arm, task=task, trial=trial, seed=options.seed + trial,
                max_errors=options.max_errors, user=_user_kind(cell.domain, config), llm=llm,
                agent="simulated" if precision.simulated_errors is not None else "llm",
                inject=list(precision.simulated_errors or []),
                user_llm=f"openai/{user_endpoint.model}" if user_endpoint else None,
                user_llm_args={"api_base": user_endpoint.base_url,
                               "api_key": user_endpoint.api_key or "none",
                               "temperature": 0} if user_endpoint else {},
                timeout=options.episode_timeout,
            )
            spec.llm_args = {**llm_args, "extra_headers": agent_headers(spec)}
            specs.append(spec)
    return specs


def _run_specs(specs: list[EpisodeSpec], options: RunOptions, done: set[tuple[Any, ...]],
               store: RecordStore, progress: Progress,
               events_for: EventsReader | None) -> None:
    todo = [s for s in specs if (s.cell.key, s.arm, s.task.id, s.trial) not in done]

    def one(spec: EpisodeSpec) -> EpisodeRecord:
        record = run_episode(spec, events_for)
        if events_for is not None:
            record.proxy.events_file = events_for.relative
        return record

    pool = ThreadPoolExecutor(max_workers=options.concurrency)
    try:
        for record in pool.map(one, todo):
            store.append(record)
            progress.update(record)
    except BaseException:
        # Ctrl-C or SIGTERM: leave now, so that the model server and proxy are stopped by
        # their context managers instead of after the running episode (minutes). That
        # episode then fails fast against the stopped proxy and is not recorded.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def count_planned(config: CellsConfig, options: RunOptions) -> int:
    total = 0
    for _, _, cell in config.cells(options.domains):
        cap = options.domain_tasks.get(cell.domain, options.tasks)
        total += len(select_tasks(cell.domain, cap, options.task_ids)) * options.trials * len(
            options.arms)
    return total


def _run_precision(config: CellsConfig, precision: Precision,
                   upstream: tuple[str, str, str | None], options: RunOptions,
                   done: set[tuple[Any, ...]], store: RecordStore, progress: Progress) -> None:
    """Every cell and arm of one precision, against its running model server."""
    base_url, model_id, api_key = upstream
    for cell in [c for e, p, c in config.cells(options.domains) if p is precision]:
        for arm in options.arms:
            events = events_path(options.out, cell, arm)
            settings = proxy_settings(config, precision, cell, arm, base_url, api_key,
                                      events, options.margins)
            with ProxyHost(settings) as proxy_url:
                llm_args = {"api_base": proxy_url, "api_key": "reflexguard",
                            "temperature": 0.0, "num_retries": 0,
                            "max_tokens": options.max_tokens, "timeout": CALL_TIMEOUT_S}
                specs = _specs(config, precision, cell, arm, options, f"openai/{model_id}",
                               llm_args)
                reader = EventsReader(events, options.out, skip_existing=True)
                _run_specs(specs, options, done, store, progress, reader)
                if reader.skipped:
                    LOG.warning("bench: %d unreadable line(s) in %s were skipped",
                                reader.skipped, events)


def run(config: CellsConfig, options: RunOptions) -> list[EpisodeRecord]:
    store = RecordStore(options.out / "episodes.jsonl")
    existing = store.load() if options.resume else []
    if not options.resume and store.path.exists():
        raise BenchError(f"{store.path} exists: pass --resume to continue it, or a new --out")
    done = {r.key for r in existing}
    progress = Progress(count_planned(config, options), existing)
    for entry in config.models:
        # An injected-faults variant is served by its base precision's model server.
        for server, served in served_together(entry.precisions):
            if server.simulated_errors is not None:
                cells = [c for e, p, c in config.cells(options.domains) if p is server]
                for cell in cells:
                    for arm in options.arms:
                        _run_specs(_specs(config, server, cell, arm, options, None, {}),
                                   options, done, store, progress, None)
                continue
            with upstream_for(server, options.model_threads) as upstream:
                for precision in served:
                    _run_precision(config, precision, upstream, options, done, store,
                                   progress)
    progress.bar.close()
    return store.load()
