"""cases.jsonl: one CaseRecord per line; a record already there is never written twice."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from bench.stats.bfcl_records import CaseRecord


class CaseStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # cells may finish in threads at once

    def load(self) -> list[CaseRecord]:
        if not self.path.exists():
            return []
        return [CaseRecord.model_validate_json(line)
                for line in self.path.read_text().splitlines() if line.strip()]

    def extend(self, records: Iterable[CaseRecord]) -> int:
        """Append the records whose key is not stored yet; returns how many were."""
        with self._lock:
            have = {r.key for r in self.load()}
            fresh = [r for r in records if r.key not in have]
            with self.path.open("a") as handle:
                for record in fresh:
                    handle.write(record.model_dump_json() + "\n")
                handle.flush()
            return len(fresh)
