"""From BFCL's files and reflexguard's events to CaseRecords. Pure but for `read_events`.

Correctness is BFCL's checker's: a case is correct when it has a saved answer and its
category's score file does not list it as failed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.event_tally import tally
from bench.fault_tally import injected_tally
from bench.stats.bfcl_records import BfclArm, CaseRecord
from bench.tau2.cells import Precision
from reflexguard.ops.events import Event, read_event

ERROR_KEPT = 300
INFERENCE_ERROR = "Error during inference"


def read_events(path: Path, start: int = 0) -> tuple[dict[str, list[Event]], int]:
    """reflexguard's events from byte `start` on, by session (the BFCL case id), and the
    lines skipped as unreadable (a newer writer's kinds)."""
    by_session: dict[str, list[Event]] = defaultdict(list)
    skipped = 0
    if not path.exists():
        return {}, 0
    with path.open("rb") as handle:
        handle.seek(start)
        data = handle.read()
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            event = read_event(line)
        except ValidationError:
            skipped += 1
            continue
        by_session[str(event.get("session"))].append(event)
    return dict(by_session), skipped


def proxy_fields(events: Iterable[Event]) -> dict[str, Any]:
    """What reflexguard saw for one case: channels of first answers, wrong names, outcomes,
    extra upstream calls (the same reading as the tau2 bench's ProxyRecord)."""
    events = list(events)  # read twice: the tally and the injected faults
    seen = tally(events)
    return {"requests": seen.requests, "first_attempt_channels": dict(seen.first),
            "unknown_tool_names": dict(seen.names), "outcomes": dict(seen.outcomes),
            "extra_upstream_calls": seen.extra, "repeated_calls": dict(seen.repeated),
            "injected": injected_tally(events)}


def _total(value: Any) -> int:
    """BFCL's token counts: a number per request, nested in lists for multi-turn cases."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, list):
        return sum(_total(v) for v in value)
    return 0


def _seconds(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list):
        return sum(_seconds(v) for v in value)
    return 0.0


def case_records(model: str, family: str, precision: Precision, arm: BfclArm,
                 ids: dict[str, list[str]], results: dict[str, dict[str, Any]],
                 scores: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]],
                 events: dict[str, list[Event]], simulated: bool = False) -> list[CaseRecord]:
    """One record per asked case that BFCL saved an answer for and scored."""
    records = []
    for category, wanted in ids.items():
        if category not in scores:
            continue
        _, failed = scores[category]
        for case_id in wanted:
            saved = results.get(case_id)
            if saved is None:
                continue  # not generated (interrupted): a --resume run does it
            failure = failed.get(case_id)
            errors = failure.get("error") if failure else None
            if isinstance(errors, list):
                message = "; ".join(str(e) for e in errors)
            else:
                message = "" if errors is None else str(errors)
            result = saved.get("result")
            records.append(CaseRecord(
                model=model, family=family, precision=precision.label,
                reference=precision.reference, arm=arm, category=category, case_id=case_id,
                correct=failure is None,
                error_type=str(failure.get("error_type")) if failure else None,
                error=message[:ERROR_KEPT],
                inference_error=isinstance(result, str) and result.startswith(INFERENCE_ERROR),
                result=result, input_tokens=_total(saved.get("input_token_count")),
                output_tokens=_total(saved.get("output_token_count")),
                latency_s=round(_seconds(saved.get("latency")), 3),
                simulated=simulated, **proxy_fields(events.get(case_id, []))))
    return records
