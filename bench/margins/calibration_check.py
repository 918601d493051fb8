"""`python -m bench.margins.calibration_check RUN --candidate Q2_K CALIBRATION...`: which
calibration predicts a run's held-out decisions best.

Every calibration file given (the shipped `reflexguard/data/margin_calibration.json`, the
run's own `calibration-<candidate>.json`, any other) is scored on the same decisions: the
held-out half of RUN's pairs (reference Q4_K_M against the candidate), the half its own
calibration was not fitted on. Brier score of the predicted flip and error rates (lower is
better; a constant rate is the baseline the report prints) and the AUROC of the prediction.
The I/O shell; the maths is `bench.stats.margins.score_bins`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import orjson

from bench.margins.records import DecisionStore
from bench.margins.report import rows_of
from bench.margins.runner import REFERENCE
from bench.stats import margins as stats
from reflexguard.core.screen import CalibrationError, parse_calibration
from reflexguard.ops.oneline import OneLineParser

PROG = "bench.margins.calibration_check"


def _fail(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def table(run: Path, candidate: str, files: list[Path]) -> str:
    rows = rows_of(DecisionStore(run / "decisions.jsonl").load())
    reference = [r for r in rows if r.variant == REFERENCE]
    joined = stats.pairs(reference, [r for r in rows if r.variant == candidate])
    measured = [p for p in joined if p.reference.name_margin is not None]
    lines = [f"Held-out decisions of {run} ({REFERENCE} vs {candidate}); lower Brier is "
             "better.", "",
             "| calibration | fitted on | held-out n | Brier flip | Brier error | "
             "AUROC flip | AUROC error |", "|---|---|---|---|---|---|---|"]
    [baseline] = stats.constant_bins(measured)
    if baseline.n:  # the baseline a calibration must beat: one rate for every margin
        constant = stats.score_bins([baseline], measured)
        lines.append(f"| a constant rate (this run's fit half) | {baseline.n} decisions | "
                     f"{constant.n} | {_num(constant.flip_brier)} | "
                     f"{_num(constant.error_brier)} | – | – |")
    for path in files:
        data = orjson.loads(path.read_bytes())
        found = stats.score_bins(parse_calibration(data).bins, measured)
        lines.append(f"| `{path}` | {data.get('fit_decisions', '?')} decisions | "
                     f"{found.n} | {_num(found.flip_brier)} | {_num(found.error_brier)} | "
                     f"{_num(found.flip_auroc)} | {_num(found.error_auroc)} |")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> None:
    p = OneLineParser(prog=PROG, description=__doc__)
    p.add_argument("run", type=Path, help="a margins run directory (decisions.jsonl)")
    p.add_argument("calibrations", type=Path, nargs="+", help="calibration files to score")
    p.add_argument("--candidate", default="Q2_K")
    args = p.parse_args(argv)
    if not (args.run / "decisions.jsonl").exists():
        _fail(f"no decisions recorded in {args.run}")
    for path in args.calibrations:
        if not path.exists():
            _fail(f"calibration file not found: {path}")
    try:
        print(table(args.run, args.candidate, args.calibrations))
    except orjson.JSONDecodeError as exc:
        _fail(f"not a calibration file (not JSON: {exc})")
    except CalibrationError as exc:  # the screen's own reading of the file
        _fail(f"not a calibration file ({exc})")


if __name__ == "__main__":
    main()
