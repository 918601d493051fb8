"""`reflexguard screen`: the margin risk screen over an events file or a bench run.

An I/O edge: it reads the events and the calibration, and writes the report. The
arithmetic is reflexguard.core.screen's; docs/screen.md says what the numbers mean.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import orjson

from reflexguard.cli.errors import CliError
from reflexguard.core.screen import (
    Calibration,
    CalibrationError,
    Decision,
    decisions_of,
    parse_calibration,
    screen,
)
from reflexguard.core.screen_report import screen_json, screen_markdown

# Where the study's calibration ships, if it does (one candidate precision: Q2_K).
SHIPPED_CALIBRATION = Path(__file__).resolve().parents[1] / "data" / "margin_calibration.json"


def add_screen_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "screen", help="predict a lower precision's tool-call errors from logit margins")
    parser.add_argument("events", type=Path, help="an events JSONL file recorded with "
                        "`serve --margins on`, or a bench run directory")
    parser.add_argument("--match", help="in a directory, only events files whose name "
                        "contains this, e.g. @Q4_K_M")
    parser.add_argument("--calibration", type=Path, help="a margin calibration JSON "
                        "(python -m bench.margins); default: the shipped one")
    parser.add_argument("--candidate", type=Path, help="events (file or run directory) of a "
                        "run at the candidate precision, to set beside the prediction")
    parser.add_argument("--candidate-match", dest="candidate_match",
                        help="like --match, for --candidate")
    parser.add_argument("--threshold", type=float, help="thin below this many nats "
                        "(default: the calibration's thin_threshold)")
    parser.add_argument("--out", type=Path, help="write screen.md and screen.json here "
                        "(default: Markdown to stdout)")
    parser.add_argument("--json", type=Path, dest="json_path", help="write the JSON here")


def _files(path: Path, match: str | None) -> list[Path]:
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.jsonl") if match is None or match in p.name)
        if not found:
            raise CliError(f"{path}: no events files (*.jsonl"
                           f"{' matching ' + repr(match) if match else ''}) in it")
        return found
    if not path.is_file():
        raise CliError(f"{path}: no such file or directory")
    return [path]


def _read(path: Path, match: str | None) -> tuple[list[Decision], int]:
    """The decisions of every events file, and how many lines could not be read."""
    events: list[dict[str, Any]] = []
    skipped = 0
    for file in _files(path, match):
        try:
            lines = file.read_bytes().splitlines()
        except OSError as exc:
            raise CliError(f"{file}: {exc.strerror or exc}") from None
        for line in lines:
            if not line.strip():
                continue
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                skipped += 1
                continue
            if isinstance(value, dict):
                events.append(value)
            else:
                skipped += 1
    return decisions_of(events), skipped


def _calibration(path: Path | None) -> tuple[Calibration, Path]:
    chosen = path or (SHIPPED_CALIBRATION if SHIPPED_CALIBRATION.is_file() else None)
    if chosen is None:
        raise CliError("the prediction needs a margin calibration: pass --calibration FILE "
                       "(made by python -m bench.margins); none ships with this install")
    try:
        data = json.loads(chosen.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"{chosen}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(f"{chosen}: not JSON ({exc})") from None
    try:
        return parse_calibration(data), chosen
    except CalibrationError as exc:
        raise CliError(f"{chosen}: {exc}") from None


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None


def run_screen(args: argparse.Namespace) -> int:
    reference, skipped = _read(args.events, args.match)
    if not any(d.has_margins for d in reference):
        raise CliError(f"{args.events}: no tool call carries margins; record the reference "
                       "with `reflexguard serve --margins on` (docs/screen.md)")
    calibration, calibration_path = _calibration(args.calibration)
    candidate = None
    sources: dict[str, Any] = {"reference": str(args.events), "skipped_lines": skipped,
                               "calibration": str(calibration_path)}
    if args.candidate is not None:
        candidate, candidate_skipped = _read(args.candidate, args.candidate_match)
        sources.update(candidate=str(args.candidate), candidate_skipped_lines=candidate_skipped)
    threshold = calibration.thin_threshold if args.threshold is None else args.threshold
    result = screen([d for d in reference if d.has_margins], calibration, threshold, candidate)
    markdown = screen_markdown(result, sources)
    data = json.dumps(screen_json(result, sources), indent=2) + "\n"
    if args.out is not None:
        _write(args.out / "screen.md", markdown)
        _write(args.out / "screen.json", data)
        print(f"wrote {args.out / 'screen.md'} and {args.out / 'screen.json'}")
    else:
        print(markdown)
    if args.json_path is not None:
        _write(args.json_path, data)
    return 0
