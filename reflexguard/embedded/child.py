"""The embedded upstream as a child process: llama-cpp-python's OpenAI server on loopback.

This is an I/O edge. `launch` starts the child on a free port and returns at once (the
supervisor waits for it asynchronously); `model_server` is the blocking form the bench
and the real-model tests use. Either way a child counts as ready only once `/v1/models`
answers AND it has decoded one token: a build with instructions this CPU cannot run
loads fine and dies with SIGILL on its first decode, so loading alone proves nothing.
Children die with their parent (lifetime.py).
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

import orjson

from reflexguard.embedded import lifetime, model_store
from reflexguard.embedded.exits import describe_exit
from reflexguard.embedded.lifetime import stop
from reflexguard.ops.install import install_runtime
from reflexguard.ops.loopback import free_port

HEALTH_TIMEOUT = 180.0
# One greedy token: enough to run every kernel a real request runs, cheap on any CPU.
DECODE_PROBE = {"prompt": "Hello", "max_tokens": 1, "temperature": 0.0}


class ChildFailed(Exception):
    """The embedded model server could not start or stopped unexpectedly."""


@dataclass
class ModelServer:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path
    variant: str
    follows_parent: bool = True

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def death(self) -> str:
        """One line: how it ended, the likely cause, and the end of its log."""
        code = self.process.returncode
        if code is None:
            return f"embedded model server ({self.variant}) is still running"
        reason = describe_exit(code)
        tail = self.log_tail() or "(its log is empty)"
        return (f"embedded model server ({self.variant}) died: {reason.what}; likely cause: "
                f"{reason.cause}; last log lines: {tail}; full log: {self.log_path}")


def command(model: Path, port: int, n_ctx: int, threads: int) -> list[str]:
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
        "--n_threads", str(threads), "--n_threads_batch", str(threads),
        "--model_alias", model.stem,
    ]


def check_runtime() -> None:
    try:
        import llama_cpp  # noqa: F401  (only to fail early with a clear message)
    except ImportError:
        raise ChildFailed(f"llama-cpp-python is not installed; {install_runtime()}, or serve "
                          "another model with --upstream URL") from None


def launch(variant: str, model: Path, n_ctx: int = 8192, threads: int | None = None,
           ) -> ModelServer:
    """Start the child and return at once; it is not ready yet."""
    port = free_port()
    logs = model_store.home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"llama-server-{variant}-{port}.log"
    threads = threads or os.cpu_count() or 1
    with log_path.open("wb") as log:
        spawned = lifetime.spawn(command(model, port, n_ctx, threads), log)
    return ModelServer(spawned.process, f"http://127.0.0.1:{port}/v1", log_path, variant,
                       spawned.follows_parent)


def _answers(url: str, body: bytes | None = None, timeout: float = 2.0) -> bool:
    request = urllib.request.Request(url, data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(server: ModelServer, timeout: float = HEALTH_TIMEOUT) -> None:
    """Block until the child serves and has decoded a token; ChildFailed otherwise."""
    deadline = time.monotonic() + timeout
    loaded = False
    while True:
        if not server.alive():
            raise ChildFailed(server.death())
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            what = "decoded a token" if loaded else "answered /v1/models"
            raise ChildFailed(f"embedded model server ({server.variant}) has not {what} "
                              f"after {timeout:.0f} s; log: {server.log_path}")
        if not loaded:
            loaded = _answers(server.base_url + "/models")
        elif _answers(server.base_url + "/completions", orjson.dumps(DECODE_PROBE),
                      timeout=max(1.0, remaining)):
            return
        time.sleep(0.25)


@contextmanager
def model_server(variant: str, n_ctx: int = 8192, threads: int | None = None) -> Iterator[
        ModelServer]:
    """A running embedded model server; it is stopped when the block ends."""
    check_runtime()
    server = launch(variant, model_store.ensure(variant), n_ctx, threads)
    try:
        wait_ready(server)
        yield server
    finally:
        stop(server.process)

