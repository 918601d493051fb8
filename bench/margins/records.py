"""decisions.jsonl: one record per decision and precision, appended as each is made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


class DecisionStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        records = []
        for line in self.path.read_bytes().splitlines():
            if line.strip():
                try:
                    records.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    continue  # a line cut by a kill mid-write: that decision is redone
        return records

    def append(self, record: dict[str, Any]) -> None:
        with self.path.open("ab") as handle:
            handle.write(orjson.dumps(record) + b"\n")
            handle.flush()


def record_key(record: dict[str, Any]) -> tuple[str, str, str, int]:
    return (record["variant"], record["domain"], record["task_id"], int(record["step"]))
