"""Running the cells: a model server per precision, a reflexguard per arm, BFCL's CLI.

The I/O shell of the BFCL bench. Each (cell, arm) is one BFCL project root under
`OUT/bfcl/`; BFCL's `generate` skips the cases already in its result files, so a rerun
with `--resume` continues an interrupted run, and records already in `cases.jsonl` stay.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr
from tqdm import tqdm

from bench.bfcl import harness
from bench.bfcl.cap import CapHost
from bench.bfcl.categories import DEFAULT_SEED, sample
from bench.bfcl.collect import case_records, read_events
from bench.bfcl.store import CaseStore
from bench.stats.bfcl_records import BfclArm, CaseRecord
from bench.tau2.cells import CellsConfig, ModelEntry, Precision
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
    return out / "bfcl" / f"{_slug(entry.name)}@{_slug(precision.label.split()[0])}-{arm}"


def events_path(out: Path, entry: ModelEntry, precision: Precision, arm: BfclArm) -> Path:
    return out / "events" / f"{_slug(entry.name)}@{_slug(precision.label.split()[0])}-{arm}.jsonl"


@contextlib.contextmanager
def upstream_for(precision: Precision, threads: int | None, cap: int) -> Iterator[
        tuple[str, str, str | None]]:
    """(base URL, model id, api key) of a precision's model server, behind the cap.

    The embedded model is served as `bench.compare` serves it; an endpoint (vLLM, a test's
    fake) is used as it is, under the same generation cap.
    """
    if precision.endpoint is not None:
        with CapHost(precision.endpoint.base_url, cap) as url:
            yield url, precision.endpoint.model, precision.endpoint.api_key
        return
    from reflexguard.embedded.child import model_server

    assert precision.embedded is not None
    with model_server(precision.embedded, n_ctx=precision.n_ctx, threads=threads) as server, \
            CapHost(server.base_url, cap) as url:
        yield url, f"embedded-{precision.embedded}", None


def proxy_settings(config: CellsConfig, precision: Precision, arm: BfclArm, base_url: str,
                   api_key: str | None, events: Path) -> Settings:
    """Observe mode for `off` (text calls are still lifted, as a server's tool parser
    would), the ladder for `on`; everything else as the tau2 bench configures a cell."""
    return Settings(
        upstream=base_url, upstream_api_key=SecretStr(api_key) if api_key else None,
        repair=arm == "on", max_repairs=config.max_repairs,
        tool_call_format=precision.tool_call_format,
        constrained_retry=precision.constrained_retry,
        grounding=DOMAIN in config.grounding_domains, events=events, log_level="warning")


class Progress:
    """One bar over every case of the run; BFCL's result files are polled while it runs."""

    def __init__(self, total: int) -> None:
        self.bar = tqdm(total=total, unit="case", desc="bfcl cases")
        self.base = 0  # cases of the (cell, arm)s finished before the current one
        self.already = 0  # cases the current (cell, arm) had saved before it started

    def start(self, label: str, already: int) -> None:
        self.bar.set_postfix_str(label)
        self.already = already
        self(already)

    def __call__(self, saved: int) -> None:
        value = self.base + saved
        if value > self.bar.n:
            self.bar.update(value - self.bar.n)

    def finish(self, cases: int) -> None:
        self.base += cases
        self.already = 0
        self(0)


def _arm(config: CellsConfig, entry: ModelEntry, precision: Precision, arm: BfclArm,
         options: RunOptions, ids: dict[str, list[str]], upstream: tuple[str, str, str | None],
         store: CaseStore, progress: Progress, simulated: bool) -> None:
    base_url, model_id, api_key = upstream
    project = project_root(options.out, entry, precision, arm)
    events = events_path(options.out, entry, precision, arm)
    events.parent.mkdir(parents=True, exist_ok=True)
    before = set(harness.read_results(project)) if project.exists() else set()
    # A case cut off mid-generation is generated again: only its new events count.
    offset = events.stat().st_size if events.exists() else 0
    todo = sum(1 for wanted in ids.values() for i in wanted if i not in before)
    progress.start(f"{entry.name}@{precision.label.split()[0]} {arm}",
                   sum(1 for wanted in ids.values() for i in wanted if i in before))
    if todo:
        with ProxyHost(proxy_settings(config, precision, arm, base_url, api_key,
                                      events)) as proxy_url:
            harness.generate(options.root, project, model_id, proxy_url, ids,
                             lambda saved: progress(_asked_saved(project, ids)))
    harness.evaluate(options.root, project, list(ids))
    old_events, skipped_old = read_events(events, 0)
    new_events, skipped_new = read_events(events, offset)
    by_case = {case: (old_events if case in before else new_events).get(case, [])
               for wanted in ids.values() for case in wanted}
    if skipped_old:
        LOG.warning("bench.bfcl: %d unreadable line(s) in %s were skipped", skipped_old, events)
    del skipped_new
    records = case_records(entry.name, entry.family, precision, arm, ids,
                           harness.read_results(project), harness.read_scores(project),
                           by_case, simulated)
    store.extend(records)
    progress.finish(sum(len(w) for w in ids.values()))


def run(config: CellsConfig, options: RunOptions, simulated: bool = False) -> list[CaseRecord]:
    store = CaseStore(options.out / "cases.jsonl")
    if not options.resume and store.path.exists():
        raise BenchError(f"{store.path} exists: pass --resume to continue it, or a new --out")
    ids = plan(options)
    per_arm = sum(len(w) for w in ids.values())
    arms_total = sum(len(e.precisions) for e in config.models) * len(options.arms)
    existing = store.load()
    done_arms = {(r.cell, r.arm) for r in existing}
    progress = Progress(per_arm * arms_total)
    for entry in config.models:
        for precision in entry.precisions:
            if precision.simulated_errors is not None:
                raise BenchError("the BFCL bench runs a model (embedded or an endpoint); "
                                 "simulated_errors cells are tau2's")
            wanted = [a for a in options.arms
                      if (f"{entry.name}@{precision.label.split()[0]}", a) not in done_arms
                      or _missing(existing, entry, precision, a, ids)]
            for arm in options.arms:
                if arm not in wanted:
                    progress.finish(per_arm)
            if not wanted:
                continue
            with upstream_for(precision, options.model_threads,
                              options.generation_cap) as upstream:
                for arm in wanted:
                    _arm(config, entry, precision, arm, options, ids, upstream, store,
                         progress, simulated)
    progress.bar.close()
    return store.load()


def _asked_saved(project: Path, ids: dict[str, list[str]]) -> int:
    """Asked cases BFCL has saved so far (its files may hold others from earlier samples)."""
    saved = harness.read_results(project)
    return sum(1 for wanted in ids.values() for i in wanted if i in saved)


def _missing(existing: list[CaseRecord], entry: ModelEntry, precision: Precision,
             arm: BfclArm, ids: dict[str, list[str]]) -> bool:
    cell = f"{entry.name}@{precision.label.split()[0]}"
    have = {r.case_id for r in existing if r.cell == cell and r.arm == arm}
    return any(i not in have for wanted in ids.values() for i in wanted)
