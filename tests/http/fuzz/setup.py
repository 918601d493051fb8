"""The fuzz suite's set-up: reflexguard in two settings profiles behind the harness, its
production logging pointed at a file, and every proxy variable aimed at the canary.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from reflexguard.ops.config import Settings
from reflexguard.ops.telemetry import configure_logging
from tests.http.fuzz.checks import SECRET
from tests.http.fuzz.harness import Harness
from tests.http.fuzz.strategies import OVERSIZE, valid_call_scene

ADMIN_TOKEN = "fuzz-admin-token"
SLOW_BOUND = 3.0  # profile a's header and body timeouts, seconds


def profiles(upstream_port: int, directory: Path) -> dict[str, Settings]:
    """Two settings profiles: the defaults, and every option that changes a code path on,
    with credentials in the upstream URL and a request deadline."""
    known = Settings.model_fields
    a: dict[str, Any] = {"upstream": f"http://127.0.0.1:{upstream_port}/v1",
                         "events": directory / "events-a.jsonl", "max_repairs": 1,
                         "upstream_timeout": 10,
                         # short read timeouts: the slow-client cases see them act
                         "header_timeout": SLOW_BOUND, "body_timeout": SLOW_BOUND}
    b: dict[str, Any] = {
        "upstream": f"http://fuzzuser:{SECRET}@127.0.0.1:{upstream_port}/v1",
        "events": directory / "events-b.jsonl", "tool_call_format": "content",
        "json_repair": True, "snap_names": True, "constrained_retry": "response_format",
        "on_exhausted": "error", "grounding": True, "max_repairs": 2, "upstream_timeout": 10,
        # Small, so the oversized answers the fuzz draws pass it (strategies.OVERSIZE).
        "max_answer_bytes": OVERSIZE,
        "loop_guard": "repair",  # the loop scan reads every drawn history too (issue 32)
    }
    optional = {"request_timeout": 20, "admin_token": ADMIN_TOKEN}
    b.update({k: v for k, v in optional.items() if k in known})
    return {"a": Settings(**a), "b": Settings(**b)}


@contextmanager
def logs_to(path: Path) -> Iterator[None]:
    """reflexguard's production logging (JSON bytes to stderr), pointed at a file."""
    stream = path.open("w")
    saved, sys.stderr = sys.stderr, stream  # configure_logging binds sys.stderr.buffer
    try:
        configure_logging("info")
    finally:
        sys.stderr = saved
    try:
        yield
    finally:
        structlog.reset_defaults()
        stream.close()


@contextmanager
def proxy_variables(port: int) -> Iterator[None]:
    """Aim every HTTP proxy variable at the canary: a native library that fetches a
    schema from anywhere (jsonschema-rs honours these) then lands on the canary too."""
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
             "NO_PROXY", "no_proxy")
    saved = {name: os.environ.get(name) for name in names}
    for name in names[:6]:
        os.environ[name] = f"http://127.0.0.1:{port}"
    for name in names[6:]:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass(frozen=True)
class Fixture:
    harness: Harness
    directory: Path


@contextmanager
def fuzz_setup(directory: Path) -> Iterator[Fixture]:
    # Five threads share one GIL here; a 1 ms switch interval (5 ms by default) keeps the
    # prober's timing about reflexguard's loop rather than about whose turn it was.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    harness = Harness(valid_call_scene())
    with proxy_variables(harness.canary.port), logs_to(directory / "log.jsonl"):
        for name, profile in profiles(harness.upstream_port, directory).items():
            harness.add_proxy(name, profile)
        harness.start_watching("a")
        try:
            yield Fixture(harness, directory)
        finally:
            harness.close()
            sys.setswitchinterval(interval)
