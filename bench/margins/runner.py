"""Running the study: one precision at a time over every decision, saved at once.

Domain by domain, one model is loaded per precision and asked every decision of the
domain in order (task, step), so the KV cache's prefix is reused from one step to the
next and, for the shared system prompt, from one task to the next. Domains share no
prefix (each has its own system prompt and tools), so going domain by domain costs only
a model load (seconds) and makes an interrupted run usable: finished domains are
complete at every precision. Decisions already in `decisions.jsonl` are
skipped with `--resume`; each new one is appended as soon as it is made.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from tqdm import tqdm

from bench.margins.bfcl_decisions import BFCL_DOMAINS, BfclDecisionError, bfcl_decisions
from bench.margins.classify import classify, margins_of
from bench.margins.decisions import Decision, TaskDecisions, domain_decisions
from bench.margins.model import Model
from bench.margins.records import DecisionStore, record_key

REFERENCE = "Q4_K_M"
VARIANTS = ("Q4_K_M", "Q3_K_S", "Q2_K")
DOMAINS = ("mock", "retail", "telecom")  # the default: tau2's
ALL_DOMAINS = (*DOMAINS, *BFCL_DOMAINS)  # and BFCL's single-turn cases (bfcl_decisions.py)
# mock 9, retail 2, telecom 1: 18 decisions per precision; 70 minutes for the three at load
# average 3-10 on the shared 2 cores (docs/margins.md), mostly prompt evaluation.
DEFAULT_TASKS = {"mock": 9, "retail": 2, "telecom": 1}
N_CTX = 16384  # telecom's solo prompt with its 44 tools is ~10k tokens, plus the steps
MAX_TOKENS = 192
# Measured on the shared 2 cores: 1 thread evaluated prompts at 17.7 tok/s and generated
# 5.7 tok/s, 2 threads 11.8 and 1.0 (they wait on each other when a core is taken).
THREADS = 1


class StudyError(Exception):
    """A user mistake in the study's options: one line, exit 2."""


@dataclass
class StudyOptions:
    out: Path
    domains: list[str] = field(default_factory=lambda: list(DOMAINS))
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    tasks: int | None = None  # per domain; None: DEFAULT_TASKS
    resume: bool = False
    max_tokens: int = MAX_TOKENS
    n_ctx: int = N_CTX
    threads: int = THREADS
    command: str = ""  # recorded in plan.json: the report and calibration files cite it


@dataclass
class Plan:
    decisions: list[Decision]
    tasks: dict[str, list[str]]
    skipped: dict[str, list[dict[str, Any]]]
    gold_errors: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "decisions": len(self.decisions),
                "per_domain": {d: sum(1 for x in self.decisions if x.domain == d)
                               for d in self.tasks},
                "skipped": self.skipped, "gold_errors": self.gold_errors}


def plan(options: StudyOptions) -> Plan:
    decisions: list[Decision] = []
    tasks: dict[str, list[str]] = {}
    skipped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    gold_errors: dict[str, int] = {}
    for domain in options.domains:
        count = options.tasks if options.tasks else DEFAULT_TASKS.get(domain)
        tasks[domain] = []
        gold_errors[domain] = 0
        for built in _decisions(domain, count):
            tasks[domain].append(built.task_id)
            decisions.extend(built.decisions)
            gold_errors[domain] += built.gold_errors
            skipped[domain].extend({"task_id": built.task_id, "step": step, "reason": reason}
                                   for step, reason in built.skipped)
    return Plan(decisions, tasks, dict(skipped), gold_errors)


def _decisions(domain: str, count: int | None) -> Iterator[TaskDecisions]:
    if domain not in BFCL_DOMAINS:
        return domain_decisions(domain, count)
    try:  # listed here, so that BFCL's failure surfaces inside this try
        return iter(list(bfcl_decisions(domain, count)))
    except BfclDecisionError as exc:
        raise StudyError(str(exc)) from None


def decide(model: Model, decision: Decision, variant: str, max_tokens: int,
           first_of_task: bool) -> dict[str, Any]:
    tokens = model.prompt_tokens(decision.messages, decision.tools, decision.tool_choice)
    generation = model.generate(tokens, max_tokens)
    name, channel = classify(generation.completion, decision.tools, decision.tool_choice)
    name_margin, call_margin = margins_of(generation.completion)
    return {
        "variant": variant, "domain": decision.domain, "task_id": decision.task_id,
        "step": decision.step, "gold_name": decision.gold_name,
        "gold_arguments": decision.gold_arguments, "requestor": decision.requestor,
        "chosen_name": name, "channel": channel, "name_margin": name_margin,
        "call_margin": call_margin, "text": generation.text,
        "finish_reason": generation.finish_reason, "prompt_tokens": generation.prompt_tokens,
        "reused_tokens": generation.reused_tokens,
        "completion_tokens": generation.completion_tokens,
        "seconds": round(generation.seconds, 3), "first_of_task": first_of_task,
        "model": model.model_name, "simulated": False,
        "completion": generation.completion,
    }


def _model_path(variant: str) -> Path:
    from reflexguard.embedded import model_store

    try:
        return model_store.ensure(variant)
    except model_store.ModelError as exc:
        raise StudyError(str(exc)) from None


def run(options: StudyOptions) -> list[dict[str, Any]]:
    store = DecisionStore(options.out / "decisions.jsonl")
    if not options.resume and store.path.exists():
        raise StudyError(f"{store.path} exists: pass --resume to continue it, or a new --out")
    built = plan(options)
    planned = {**built.as_json(), "command": options.command,
               "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    earlier = options.out / "plan.json"
    if options.resume and earlier.exists():  # the run's own command and start stay
        first = orjson.loads(earlier.read_bytes())
        planned.update({k: first[k] for k in ("command", "started") if first.get(k)})
    (options.out / "plan.json").write_bytes(orjson.dumps(planned, option=orjson.OPT_INDENT_2))
    done = {record_key(r) for r in store.load()}
    firsts: dict[tuple[str, str], int] = {}
    for decision in built.decisions:
        firsts.setdefault((decision.domain, decision.task_id), decision.step)
    total = len(built.decisions) * len(options.variants)
    bar = tqdm(total=total, initial=len(done & _keys(built, options)), unit="decision",
               desc="decisions")
    for domain in options.domains:  # domain by domain, so an interrupted run is usable
        for variant in options.variants:
            todo = [d for d in built.decisions
                    if d.domain == domain and (variant, *d.key) not in done]
            if not todo:
                continue
            model = Model(_model_path(variant), options.n_ctx, options.threads)
            for decision in todo:
                first = firsts[decision.domain, decision.task_id] == decision.step
                started = time.monotonic()
                record = decide(model, decision, variant, options.max_tokens, first)
                store.append(record)
                bar.set_postfix(variant=variant, last=f"{decision.task_id}/{decision.step}",
                                s=f"{time.monotonic() - started:.1f}")
                bar.update(1)
            model.close()
    bar.close()
    return store.load()


def _keys(built: Plan, options: StudyOptions) -> set[tuple[str, str, str, int]]:
    return {(v, *d.key) for v in options.variants for d in built.decisions}
