"""Decisions from BFCL's single-turn cases: the request BFCL's own handler sends, and its gold.

Each BFCL case is one decision (step 0, the first call): the messages and tools of the
first request BFCL's `OpenAICompletionsHandler` would send (built by BFCL's own code in
`.venv-bfcl`: `bench/bfcl/launch.py requests`, never re-implemented here), and the first
call of the case's ground truth as the gold name. `multiple` offers 2-4 tools for one gold
call, so its name decision is the one the paper's mechanism is about; `parallel_multiple`
expects several calls, and its gold name is the first one BFCL lists (as tau2's one gold
path, a strict exact match; a flip needs no gold). The cases are the BFCL bench's own seeded
sample (`bench/bfcl/categories.py`), so `--tasks N` asks the first N cases the bench runs.

No model is called here; BFCL's CLI is started once per domain (~11 s of its imports).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

from bench.bfcl import harness
from bench.bfcl.categories import DEFAULT_SEED, sample
from bench.margins.decisions import Decision, TaskDecisions

# The study's domain name -> BFCL's category.
BFCL_DOMAINS = {"bfcl_multiple": "multiple", "bfcl_parallel_multiple": "parallel_multiple"}
DUMP_TIMEOUT_S = 300.0
ROOT = Path(__file__).resolve().parents[2]  # the checkout: .venv-bfcl lives here


class BfclDecisionError(Exception):
    """BFCL's environment is missing or its request dump failed: one line for the user."""


def decisions_of(domain: str, lines: list[str], order: list[str]) -> list[TaskDecisions]:
    """One TaskDecisions per case, in `order`, from the dump's JSON lines (pure)."""
    dumped = {row["id"]: row for row in (json.loads(line) for line in lines if line.strip())}
    missing = [case for case in order if case not in dumped]
    if missing:
        raise BfclDecisionError(f"BFCL dumped no request for {', '.join(missing[:5])}")
    out = []
    for case in order:
        row = dumped[case]
        built = TaskDecisions(case)
        if not row["ground_truth"]:
            built.skipped.append((0, "no ground truth"))
        else:
            [(gold_name, gold_arguments)] = row["ground_truth"][0].items()
            built.decisions.append(Decision(
                domain=domain, task_id=case, step=0, gold_name=gold_name,
                gold_arguments=dict(gold_arguments), requestor="assistant",
                messages=row["messages"], tools=row["tools"], tool_choice="auto"))
        out.append(built)
    return out


def bfcl_decisions(domain: str, count: int | None, root: Path = ROOT) -> Iterator[TaskDecisions]:
    """The decisions of the first `count` cases of the bench's seeded sample (all if None)."""
    category = BFCL_DOMAINS[domain]
    try:
        ids = sample(category, harness.category_ids(harness.data_dir(root), category), count,
                     DEFAULT_SEED)
        python = harness.bfcl_python(root)
    except harness.HarnessError as exc:
        raise BfclDecisionError(str(exc)) from None
    try:
        done = subprocess.run([str(python), str(harness.LAUNCHER), "requests", category, *ids],
                              capture_output=True, text=True, timeout=DUMP_TIMEOUT_S,
                              check=False, cwd=root)
    except subprocess.TimeoutExpired:
        raise BfclDecisionError(f"BFCL's request dump for {category} took over "
                                f"{DUMP_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BfclDecisionError(f"BFCL's request dump for {category} failed: {last}")
    yield from decisions_of(domain, done.stdout.splitlines(), ids)
