"""BFCL's own CLI, run from .venv-bfcl as a subprocess: generate, evaluate, read its files.

One BFCL project root per cell and arm (`BFCL_PROJECT_ROOT`): BFCL names its result and
score files after the model, so two arms in one root would overwrite each other. BFCL
itself skips cases already in its result files, which makes a rerun resume.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LAUNCHER = Path(__file__).with_name("launch.py")
REGISTRY_NAME = "reflexguard-bench-FC"  # bench/bfcl/launch.py registers it
IDS_FILE = "test_case_ids_to_generate.json"
POLL_S = 2.0
STOP_GRACE_S = 30.0
CLI_TIMEOUT_S = 600.0  # evaluate: the checker, not the model


class HarnessError(Exception):
    """BFCL's environment is missing or its CLI failed: one line for the user."""


class Stopped(Exception):
    """Another cell failed or the run was interrupted: this cell's BFCL run was stopped."""


def bfcl_python(root: Path) -> Path:
    python = root / ".venv-bfcl" / "bin" / "python"
    if not python.exists():
        raise HarnessError(f"{python} not found: run `bash scripts/setup_bfcl.sh` first")
    return python


def data_dir(root: Path) -> Path:
    """bfcl_eval's data folder inside .venv-bfcl (BFCL v4's questions and answers)."""
    found = sorted((root / ".venv-bfcl" / "lib").glob("python3*/site-packages/bfcl_eval/data"))
    if not found:
        raise HarnessError("bfcl_eval is not installed in .venv-bfcl: run "
                           "`bash scripts/setup_bfcl.sh` first")
    return found[-1]


def category_ids(data: Path, category: str) -> list[str]:
    path = data / f"BFCL_v4_{category}.json"
    if not path.exists():
        raise HarnessError(f"BFCL has no data file for {category} ({path})")
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def _env(project: Path, model: str, base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update({"BFCL_PROJECT_ROOT": str(project.resolve()), "BFCL_BENCH_MODEL": model,
                "OPENAI_BASE_URL": base_url,
                # The SDK wants a key; reflexguard holds the upstream's own (if any).
                "OPENAI_API_KEY": "reflexguard-bench", "PYTHONUNBUFFERED": "1"})
    return env


def result_files(project: Path) -> list[Path]:
    return sorted((project / "result" / REGISTRY_NAME).rglob("BFCL_v4_*_result.json"))


def count_results(project: Path) -> int:
    total = 0
    for path in result_files(project):
        with path.open("rb") as handle:
            total += sum(1 for line in handle if line.strip())
    return total


def _stop(process: subprocess.Popen[bytes]) -> None:
    """`bfcl generate` ignores SIGTERM; SIGINT stops it (its result file keeps what is done)."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def generate(root: Path, project: Path, model: str, base_url: str,
             ids: dict[str, list[str]], on_progress: Callable[[int], None] | None = None,
             threads: int = 1, stop: threading.Event | None = None) -> None:
    """`bfcl generate --run-ids` for `ids` ({category: [ids]}), through `base_url`.
    `stop` (set by another thread) ends it as Ctrl-C would."""
    project.mkdir(parents=True, exist_ok=True)
    (project / IDS_FILE).write_text(json.dumps(ids, indent=1) + "\n")
    command = [str(bfcl_python(root)), str(LAUNCHER), "generate", "--model", REGISTRY_NAME,
               "--run-ids", "--temperature", "0", "--num-threads", str(threads)]
    with (project / "generate.log").open("ab") as log:
        process = subprocess.Popen(command, cwd=project, env=_env(project, model, base_url),
                                   stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # Ctrl-C reaches it through us
        try:
            while process.poll() is None:
                if stop is not None and stop.wait(POLL_S):
                    raise Stopped("the run is stopping")
                if stop is None:
                    time.sleep(POLL_S)
                if on_progress is not None:
                    on_progress(count_results(project))
        except BaseException:
            _stop(process)
            raise
    if on_progress is not None:
        on_progress(count_results(project))
    if process.returncode != 0:
        raise HarnessError(f"bfcl generate exited {process.returncode}: see "
                           f"{project / 'generate.log'}")


def evaluate(root: Path, project: Path, categories: list[str]) -> None:
    """BFCL's own checker over what generate saved (`--partial-eval`: a sample)."""
    command = [str(bfcl_python(root)), str(LAUNCHER), "evaluate", "--model", REGISTRY_NAME,
               "--test-category", ",".join(categories), "--partial-eval"]
    with (project / "evaluate.log").open("ab") as log:
        completed = subprocess.run(command, cwd=project, env=_env(project, "unused", ""),
                                   stdout=log, stderr=subprocess.STDOUT,
                                   timeout=CLI_TIMEOUT_S, check=False)
    if completed.returncode != 0:
        raise HarnessError(f"bfcl evaluate exited {completed.returncode}: see "
                           f"{project / 'evaluate.log'}")


def _lines(path: Path) -> list[dict[str, Any]]:
    """A JSONL file BFCL writes; a last line still being written (polled mid-run) waits."""
    text = path.read_text()
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        try:
            json.loads(lines[-1])
        except json.JSONDecodeError:
            lines = lines[:-1]
    return [json.loads(line) for line in lines if line.strip()]


def read_results(project: Path) -> dict[str, dict[str, Any]]:
    """BFCL's saved answers by case id."""
    out: dict[str, dict[str, Any]] = {}
    for path in result_files(project):
        for entry in _lines(path):
            out[str(entry["id"])] = entry
    return out


def read_scores(project: Path) -> dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    """Per category: BFCL's score header and its failed entries by case id.

    BFCL's score file is its header line, then one line per case its checker failed.
    """
    out: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {}
    for path in sorted((project / "score" / REGISTRY_NAME).rglob("BFCL_v4_*_score.json")):
        category = path.name.removeprefix("BFCL_v4_").removesuffix("_score.json")
        entries = _lines(path)
        if not entries:
            continue
        out[category] = (entries[0], {str(e["id"]): e for e in entries[1:] if "id" in e})
    return out


def scores_complete(project: Path, categories: list[str]) -> bool:
    """Whether BFCL's score files already hold a verdict for every answer its result files
    hold, in each category: `evaluate` would then only write the same files again.

    A category counts when its score header's total_count is the number of saved answers
    and its failed entries number total_count - correct_count (a score file cut off while
    written, or one from before the last answers, fails either check).
    """
    saved: dict[str, int] = {}
    for path in result_files(project):
        category = path.name.removeprefix("BFCL_v4_").removesuffix("_result.json")
        saved[category] = len({str(e["id"]) for e in _lines(path)})
    scores = read_scores(project)
    for category in categories:
        if category not in scores or category not in saved:
            return False
        header, failed = scores[category]
        total, correct = header.get("total_count"), header.get("correct_count")
        if not isinstance(total, int) or not isinstance(correct, int):
            return False
        if total != saved[category] or len(failed) != total - correct:
            return False
    return True
