"""episodes.jsonl: one record per line, appended and flushed as each episode ends."""

from __future__ import annotations

from pathlib import Path

from bench.records import EpisodeRecord


class RecordStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> list[EpisodeRecord]:
        if not self.path.exists():
            return []
        records = []
        for line in self.path.read_text().splitlines():
            if line.strip():
                records.append(EpisodeRecord.model_validate_json(line))
        return records

    def append(self, record: EpisodeRecord) -> None:
        with self.path.open("a") as handle:
            handle.write(record.model_dump_json() + "\n")
            handle.flush()
