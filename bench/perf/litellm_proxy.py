"""A real LiteLLM proxy process in front of a given upstream, for the guardrail's tests
and the bench. Started with the venv's `litellm` command on a free loopback port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from reflexguard.ops.loopback import free_port

LITELLM = Path(sys.executable).with_name("litellm")
GUARDRAIL = "reflexguard.integrations.litellm.ReflexGuardrail"
START_TIMEOUT = 90.0


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
    process = start_litellm(config, port, workdir / "litellm.log", env or {})
    try:
        wait_live(f"http://127.0.0.1:{port}", process, workdir / "litellm.log")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_litellm(process)


def start_litellm(config: Path, port: int, log: Path,
                  env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The venv's `litellm` serving `config` on loopback `port`, in a session of its own
    (its workers are stopped with it), output to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(LITELLM), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env})


def stop_litellm(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the proxy's session, SIGKILL after 15 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def wait_live(base: str, process: subprocess.Popen[bytes], log: Path,
              timeout_s: float = START_TIMEOUT) -> None:
    """Until LiteLLM's liveness check answers 200; a RuntimeError with the log's tail if the
    process exits or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
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
    raise RuntimeError(f"litellm did not start in {timeout_s:g} s:\n"
                       f"{log.read_text(errors='replace')[-3000:]}")
