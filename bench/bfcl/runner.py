"""Running the cells: a model server per precision, a reflexguard per arm, BFCL's CLI.

The I/O shell of the BFCL bench. Each (cell, arm) is one BFCL project root under
`OUT/bfcl/`; BFCL's `generate` skips the cases already in its result files, so a rerun
with `--resume` continues an interrupted run, and records already in `cases.jsonl` stay.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr
from tqdm import tqdm

from bench.bfcl import harness
from bench.bfcl.cap import CapHost
from bench.bfcl.categories import DEFAULT_SEED, sample
from bench.bfcl.collect import case_records, read_events
from bench.bfcl.shared_answers import AnswerBook, sharing_allowed
from bench.bfcl.store import CaseStore
from bench.stats.bfcl_records import BfclArm, CaseRecord
from bench.tau2.cells import CellsConfig, ModelEntry, Precision
from bench.tau2.fault_cells import served_together
from bench.tau2.proxy_host import ProxyHost
from reflexguard.ops.config import Settings

LOG = logging.getLogger("bench")
DOMAIN = "bfcl"  # the cells' domain: grounding stays off unless cells.yaml lists it
GENERATION_CAP = 512
MULTI_TURN = "multi_turn_"  # max_tokens the model server applies when BFCL sends none


class BenchError(Exception):
    """A user mistake in the bench's options: one line, exit 2."""


@dataclass
class RunOptions:
    out: Path
    arms: list[BfclArm]
    categories: list[str]
    limit: int | None = None  # per category; None: every case
    multi_turn_limit: int | None = None  # for multi_turn_* categories; None: `limit`
    seed: int = DEFAULT_SEED
    resume: bool = False
    model_threads: int | None = None
    generation_cap: int = GENERATION_CAP
    # Exact cases instead of the seeded sample ({category: [ids]}), e.g. for a test.
    cases: dict[str, list[str]] | None = None
    # Each precision's model server and arms in a thread of their own: on a shared busy
    # machine two single-threaded servers get twice the CPU share of one.
    parallel_cells: bool = False
    # Both arms share the first attempt (a cell's identical requests answered once), where
    # the stored records show it safe (bench/bfcl/shared_answers.py); else both are run.
    share_first_answers: bool = False
    root: Path = Path(__file__).resolve().parents[2]  # the checkout: .venv-bfcl lives here


def plan(options: RunOptions) -> dict[str, list[str]]:
    """{category: the fixed seeded sample of case ids} (or the exact cases asked)."""
    data = harness.data_dir(options.root)
    if options.cases is not None:
        for category, wanted in options.cases.items():
            unknown = set(wanted) - set(harness.category_ids(data, category))
            if unknown:
                raise BenchError(f"not BFCL {category} cases: {', '.join(sorted(unknown))}")
        return options.cases
    def limit(category: str) -> int | None:
        if category.startswith(MULTI_TURN) and options.multi_turn_limit is not None:
            return options.multi_turn_limit
        return options.limit

    return {c: sample(c, harness.category_ids(data, c), limit(c), options.seed)
            for c in options.categories}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def project_root(out: Path, entry: ModelEntry, precision: Precision, arm: BfclArm) -> Path:
    return out / "bfcl" / f"{_slug(entry.name)}@{_slug(precision.label.split()[0])}-{_slug(arm)}"


def events_path(out: Path, entry: ModelEntry, precision: Precision, arm: BfclArm) -> Path:
    return out / "events" / (f"{_slug(entry.name)}@{_slug(precision.label.split()[0])}-"
                             f"{_slug(arm)}.jsonl")


@contextlib.contextmanager
def upstream_for(precision: Precision, threads: int | None, cap: int,
                 book: AnswerBook | None = None) -> Iterator[tuple[str, str, str | None]]:
    """(base URL, model id, api key) of a precision's model server, behind the cap.

    The embedded model is served as `bench.compare` serves it; an endpoint (vLLM, a test's
    fake) is used as it is, under the same generation cap.
    """
    if precision.endpoint is not None:
        with CapHost(precision.endpoint.base_url, cap, book) as url:
            yield url, precision.endpoint.model, precision.endpoint.api_key
        return
    from reflexguard.embedded.child import model_server

    assert precision.embedded is not None
    with model_server(precision.embedded, n_ctx=precision.n_ctx, threads=threads) as server, \
            CapHost(server.base_url, cap, book) as url:
        yield url, f"embedded-{precision.embedded}", None


def answer_book(options: RunOptions, existing: list[CaseRecord],
                cell: str) -> AnswerBook | None:
    """The cell's book when sharing is asked and the stored records allow it; a refusal is
    a WARNING, and both arms then ask the model."""
    if not options.share_first_answers:
        return None
    verdict = sharing_allowed(existing, cell)
    if not verdict.allowed:
        LOG.warning("bench.bfcl: %s: first answers not shared, both arms ask the model: %s",
                    cell, verdict.describe())
        return None
    LOG.warning("bench.bfcl: %s: the arms share first answers: %s", cell, verdict.describe())
    path = options.out / "answers" / f"{_slug(cell)}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    return AnswerBook(path)


def proxy_settings(config: CellsConfig, precision: Precision, arm: BfclArm, base_url: str,
                   api_key: str | None, events: Path) -> Settings:
    """Observe mode for `off` (text calls are still lifted, as a server's tool parser
    would), the ladder for `on`, the ladder and the loop guard for `on+loop` (repair) and
    `on+stop` (stop); everything else as the tau2 bench configures a cell."""
    return Settings(
        upstream=base_url, upstream_api_key=SecretStr(api_key) if api_key else None,
        repair=arm != "off", max_repairs=config.max_repairs,
        loop_guard={"on+loop": "repair", "on+stop": "stop"}.get(arm, "off"),
        tool_call_format=precision.tool_call_format,
        constrained_retry=precision.constrained_retry,
        grounding=DOMAIN in config.grounding_domains, inject_faults=precision.inject_faults,
        events=events, log_level="warning")


class Progress:
    """One bar over every case of the run; BFCL's result files are polled while it runs.
    Cells may run in threads (`parallel_cells`): each (cell, arm) reports its own count."""

    def __init__(self, total: int) -> None:
        self.bar = tqdm(total=total, unit="case", desc="bfcl cases")
        self._saved: dict[str, int] = {}
        self._lock = threading.Lock()

    def set(self, key: str, saved: int) -> None:
        with self._lock:
            self._saved[key] = max(saved, self._saved.get(key, 0))
            value = sum(self._saved.values())
            self.bar.set_postfix_str(key)
            if value > self.bar.n:
                self.bar.update(value - self.bar.n)


def _arm(config: CellsConfig, entry: ModelEntry, precision: Precision, arm: BfclArm,
         options: RunOptions, ids: dict[str, list[str]], upstream: tuple[str, str, str | None],
         store: CaseStore, progress: Progress, simulated: bool, stop: threading.Event,
         book: AnswerBook | None = None) -> None:
    base_url, model_id, api_key = upstream
    hits_before = book.hits if book is not None else 0
    key = f"{_cell(entry, precision)} {arm}"
    project = project_root(options.out, entry, precision, arm)
    events = events_path(options.out, entry, precision, arm)
    events.parent.mkdir(parents=True, exist_ok=True)
    before = set(harness.read_results(project)) if project.exists() else set()
    # A case cut off mid-generation is generated again: only its new events count.
    offset = events.stat().st_size if events.exists() else 0
    todo = sum(1 for wanted in ids.values() for i in wanted if i not in before)
    progress.set(key, sum(1 for wanted in ids.values() for i in wanted if i in before))
    if todo:
        with ProxyHost(proxy_settings(config, precision, arm, base_url, api_key,
                                      events)) as proxy_url:
            harness.generate(options.root, project, model_id, proxy_url, ids,
                             lambda saved: progress.set(key, _asked_saved(project, ids)),
                             stop=stop)
    # Nothing new generated and every saved answer already scored: BFCL's checker would
    # write the same score files again (~11 s of its CLI's start per arm on a resume).
    if todo or not harness.scores_complete(project, list(ids)):
        harness.evaluate(options.root, project, list(ids))
    old_events, skipped = read_events(events, 0)
    new_events, _ = read_events(events, offset)
    by_case = {case: (old_events if case in before else new_events).get(case, [])
               for wanted in ids.values() for case in wanted}
    if skipped:
        LOG.warning("bench.bfcl: %d unreadable line(s) in %s were skipped", skipped, events)
    records = case_records(entry.name, entry.family, precision, arm, ids,
                           harness.read_results(project), harness.read_scores(project),
                           by_case, simulated)
    if book is not None:
        LOG.warning("bench.bfcl: %s: %d answer(s) from the book so far, %d asked the model",
                    key, book.hits, book.misses)
    if book is not None and book.hits > hits_before:
        records = [r.model_copy(update={"first_answers_shared": True}) for r in records]
    store.extend(records)
    progress.set(key, sum(len(w) for w in ids.values()))


def _cell(entry: ModelEntry, precision: Precision) -> str:
    return f"{entry.name}@{precision.label.split()[0]}"


def run(config: CellsConfig, options: RunOptions, simulated: bool = False) -> list[CaseRecord]:
    store = CaseStore(options.out / "cases.jsonl")
    if not options.resume and store.path.exists():
        raise BenchError(f"{store.path} exists: pass --resume to continue it, or a new --out")
    ids = plan(options)
    per_arm = sum(len(w) for w in ids.values())
    existing = store.load()
    cells, servers = [], []
    for entry in config.models:
        for precision in entry.precisions:
            if precision.simulated_errors is not None:
                raise BenchError("the BFCL bench runs a model (embedded or an endpoint); "
                                 "simulated_errors cells are tau2's")
            cells.append((entry, precision))
        servers += [(entry, server) for server, _ in served_together(entry.precisions)]
    progress = Progress(per_arm * len(cells) * len(options.arms))
    asked = {i for w in ids.values() for i in w}
    for entry, precision in cells:  # what earlier runs stored counts from the start
        for arm in options.arms:
            progress.set(f"{_cell(entry, precision)} {arm}", sum(
                1 for r in existing if r.cell == _cell(entry, precision) and r.arm == arm
                and r.case_id in asked))
    stop = threading.Event()

    def wanted_arms(entry: ModelEntry, precision: Precision) -> list[BfclArm]:
        have = {(r.arm, r.case_id) for r in existing if r.cell == _cell(entry, precision)}
        wanted = [a for a in options.arms
                  if any((a, i) not in have for w in ids.values() for i in w)]
        for arm in options.arms:
            if arm not in wanted:
                progress.set(f"{_cell(entry, precision)} {arm}", per_arm)
        return wanted

    def one(entry: ModelEntry, precision: Precision) -> None:
        # An INJECTED-faults variant is served by its base precision's server and book
        # (bench/tau2/fault_cells.py): its first requests are the base's, byte for byte.
        served = next(m for s, m in served_together(entry.precisions) if s is precision)
        todo = [(p, wanted_arms(entry, p)) for p in served]
        if not any(arms for _, arms in todo):
            return
        book = answer_book(options, existing, _cell(entry, precision))
        with upstream_for(precision, options.model_threads,
                          options.generation_cap, book) as upstream:
            for member, arms in todo:
                for arm in arms:
                    if stop.is_set():
                        return
                    _arm(config, entry, member, arm, options, ids, upstream, store,
                         progress, simulated, stop, book)

    if not options.parallel_cells:
        for entry, precision in servers:
            one(entry, precision)
    else:
        _in_threads(one, servers, stop)
    progress.bar.close()
    return store.load()


def _in_threads(one: Callable[[ModelEntry, Precision], None],
                cells: list[tuple[ModelEntry, Precision]], stop: threading.Event) -> None:
    """Every cell at once, one thread each; Ctrl-C or SIGTERM (in this main thread) stops
    every cell's BFCL run and model server before it propagates."""
    pool = ThreadPoolExecutor(max_workers=len(cells), thread_name_prefix="bfcl-cell")
    futures = [pool.submit(one, entry, precision) for entry, precision in cells]
    try:
        while not all(f.done() for f in futures):
            wait(futures, timeout=1.0, return_when=FIRST_EXCEPTION)
            if any(f.done() and f.exception() for f in futures):
                stop.set()
        failures = [f.exception() for f in futures if f.exception() is not None]
        # The cell that failed first, not the others it stopped.
        failures.sort(key=lambda e: isinstance(e, harness.Stopped))
        if failures:
            raise failures[0]  # type: ignore[misc]
    except BaseException:
        stop.set()
        pool.shutdown(wait=True)
        raise
    pool.shutdown()


def _asked_saved(project: Path, ids: dict[str, list[str]]) -> int:
    """Asked cases BFCL has saved so far (its files may hold others from earlier samples)."""
    saved = harness.read_results(project)
    return sum(1 for wanted in ids.values() for i in wanted if i in saved)
