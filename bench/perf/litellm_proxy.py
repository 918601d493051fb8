"""A real LiteLLM proxy process in front of a given upstream, for the guardrail's tests
and the bench. Started with the venv's `litellm` command on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

LITELLM = Path(sys.executable).with_name("litellm")
GUARDRAIL = "reflexguard.integrations.litellm.ReflexGuardrail"
START_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def proxy_config(upstream: str, guarded: bool, callbacks: list[str] | None = None,
                 **guardrail_params: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "model_list": [{"model_name": "m", "litellm_params": {
            "model": "openai/m", "api_base": upstream, "api_key": "k"}}],
        "general_settings": {"dangerously_permit_weak_or_unset_master_key": True},
    }
    if callbacks:
        config["litellm_settings"] = {"callbacks": callbacks}
    if guarded:
        config["guardrails"] = [{"guardrail_name": "reflexguard", "litellm_params": {
            "guardrail": GUARDRAIL, "mode": "post_call", "default_on": True,
            **guardrail_params}}]
    return config


@contextmanager
def litellm_proxy(upstream: str, workdir: Path, guarded: bool = True,
                  env: dict[str, str] | None = None, callbacks: list[str] | None = None,
                  config_text: str | None = None, **guardrail_params: Any) -> Iterator[str]:
    """The proxy's base URL (ending in /v1) while the block runs; its log in workdir.
    `config_text` is a whole config.yaml to use instead (`upstream` then unused)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "litellm.yaml"
    config.write_text(config_text if config_text is not None else yaml.safe_dump(
        proxy_config(upstream, guarded, callbacks, **guardrail_params)))
    port = free_port()
    log = (workdir / "litellm.log").open("wb")
    process = subprocess.Popen(
        [str(LITELLM), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})},
    )
    try:
        _wait_live(f"http://127.0.0.1:{port}", process, workdir / "litellm.log")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()


def _wait_live(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"litellm exited ({process.returncode}):\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"{base}/health/liveliness", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"litellm did not start in {START_TIMEOUT:g} s:\n"
                       f"{log.read_text(errors='replace')[-3000:]}")
