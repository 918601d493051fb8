"""The study's decisions as reflexguard events files, one per precision, so that
`reflexguard screen` runs on a real bench run exactly as it runs on a proxy's `--events`.

Each decision becomes the `initial` attempt the proxy would have logged for that reply
with `margins: on`: its first call's channel, name and margins. A reply with no call
(`no_call`, `empty_reply`) is a decision too, with no name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.margins.classify import margins_of

EVENTS_DIR = "events"


def attempt_event(record: dict[str, Any], threshold: float) -> dict[str, Any]:
    name_margin, call_margin = margins_of(record["completion"])
    call: dict[str, Any] = {"channel": record["channel"], "name": record["chosen_name"],
                            "detail": "", "name_margin": name_margin,
                            "call_margin": call_margin}
    if name_margin is not None and name_margin < threshold:
        call["thin_margin"] = True
    return {"event": "attempt", "ts": 0.0,
            "request_id": f"{record['domain']}/{record['task_id']}/{record['step']}",
            "session": f"{record['domain']}/{record['task_id']}", "model": record["model"],
            "attempt": 1, "kind": "initial", "calls": [call], "fixes": [], "toolset": "",
            "latency_ms": round(float(record["seconds"]) * 1000, 3), "stream": False,
            "dialect": "chat", "simulated": bool(record.get("simulated", False))}


def write_events(records: Sequence[dict[str, Any]], out: Path, threshold: float) -> list[Path]:
    """`out/events/<variant>.jsonl`, rewritten from the records; the paths written."""
    folder = out / EVENTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    by_variant: dict[str, list[bytes]] = {}
    for record in records:
        line = orjson.dumps(attempt_event(record, threshold))
        by_variant.setdefault(record["variant"], []).append(line)
    written = []
    for variant, lines in sorted(by_variant.items()):
        path = folder / f"{variant}.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        written.append(path)
    return written
