"""The embedded upstream as a managed child: llama-cpp-python's OpenAI server on loopback.

This is an I/O edge. The child is started on a free port, reported healthy only once
`/v1/models` answers, stopped with SIGTERM (then SIGKILL), and its death while serving
is noticed and reported with the end of its log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from reflexguard.embedded import store
from reflexguard.loopback import free_port

HEALTH_TIMEOUT = 180.0


class ChildFailed(Exception):
    """The embedded model server could not start or stopped unexpectedly."""


@dataclass
class ModelServer:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path
    variant: str

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def command(model: Path, port: int, n_ctx: int, threads: int) -> list[str]:
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
        "--n_threads", str(threads), "--n_threads_batch", str(threads),
        "--model_alias", model.stem,
    ]


@contextmanager
def model_server(variant: str, n_ctx: int = 8192, threads: int | None = None) -> Iterator[
        ModelServer]:
    """A running embedded model server; it is stopped when the block ends."""
    try:
        import llama_cpp  # noqa: F401  (only to fail early with a clear message)
    except ImportError:
        raise ChildFailed("llama-cpp-python is not installed; run scripts/setup.sh") from None
    model = store.ensure(variant)
    port = free_port()
    logs = store.home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"llama-server-{variant}-{port}.log"
    threads = threads or os.cpu_count() or 1
    with log_path.open("wb") as log:
        process = subprocess.Popen(command(model, port, n_ctx, threads), stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = ModelServer(process, f"http://127.0.0.1:{port}/v1", log_path, variant)
    try:
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while not _healthy(server.base_url + "/models"):
            if not server.alive():
                raise ChildFailed(f"embedded model server exited with code "
                                  f"{process.returncode}: {server.log_tail()}")
            if time.monotonic() > deadline:
                raise ChildFailed(f"embedded model server not healthy after "
                                  f"{HEALTH_TIMEOUT:.0f} s; log: {log_path}")
            time.sleep(0.25)
        yield server
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
