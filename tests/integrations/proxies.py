"""The real LiteLLM proxies of tests/integrations, started in their own processes when
collection ends (tests/integrations/conftest.py), each in front of its own fake upstream.

A LiteLLM proxy's start is a quarter to most of a minute of imports on one core; started
at the end of collection they pass beside the tests collected before them (on a 2-core
machine pytest keeps one core busy) instead of in front of the tests that use them. Each
configuration is started once per session and stopped at its end; a test waits until its
proxy answers LiteLLM's liveness check. Commands, configurations and environments are those
`bench.perf.litellm_proxy` uses (its start_litellm, wait_live and stop_litellm).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.perf.litellm_proxy import proxy_config, start_litellm, stop_litellm, wait_live
from reflexguard.ops.loopback import free_port
from tests.fakes.doc_snippets import EXAMPLE_UPSTREAM, fenced
from tests.fakes.fake_upstream import FakeUpstream
from tests.fakes.threaded_upstream import threaded_fake

REPO = Path(__file__).resolve().parents[2]
MASTER_KEY = "sk-reflexguard-test"
# A bound on a hang, not a measure: the start overlaps the suite's other tests here.
LIVE_TIMEOUT_S = 300.0


def docs_config(upstream: str) -> str:
    """docs/litellm.md's config.yaml, pointed at the fake, plus a logging probe."""
    text = fenced("litellm.md", "yaml")[0]
    assert EXAMPLE_UPSTREAM in text
    config = yaml.safe_load(text.replace(EXAMPLE_UPSTREAM, upstream))
    config["litellm_settings"] = {"callbacks": ["tests.fakes.litellm_log_probe.probe"]}
    return str(yaml.safe_dump(config))


@dataclass
class Gateway:
    fake: FakeUpstream
    workdir: Path
    process: subprocess.Popen[bytes]
    port: int

    @property
    def events(self) -> Path:
        return self.workdir / "events.jsonl"

    def url(self) -> str:
        """The proxy's base URL (ending in /v1), once LiteLLM says it is live."""
        base = f"http://127.0.0.1:{self.port}"
        wait_live(base, self.process, self.workdir / "litellm.log", LIVE_TIMEOUT_S)
        return f"{base}/v1"


_gateways: dict[str, Gateway] = {}
_stack = ExitStack()


def _config(name: str, upstream: str, workdir: Path) -> tuple[str, dict[str, str]]:
    if name == "docs":  # test_litellm_guardrail.py: the documented config, events on
        return docs_config(upstream), {
            "REFLEXGUARD_EVENTS": str(workdir / "events.jsonl"), "PYTHONPATH": str(REPO),
            "LITELLM_MASTER_KEY": MASTER_KEY,
            "REFLEXGUARD_TEST_LITELLM_LOG": str(workdir / "litellm-log.jsonl")}
    if name == "exhausted":  # test_litellm_guardrail_exhausted.py
        return yaml.safe_dump(proxy_config(upstream, True, max_repairs=1,
                                           on_exhausted="error")), {}
    raise KeyError(name)


def gateway(name: str) -> Gateway:
    """The named proxy, started now if collection did not start it."""
    if name in _gateways:
        return _gateways[name]
    fake, upstream = _stack.enter_context(threaded_fake())
    workdir = Path(tempfile.mkdtemp(prefix=f"rg-litellm-{name}-"))
    _stack.callback(shutil.rmtree, workdir, True)
    text, env = _config(name, upstream, workdir)
    (workdir / "litellm.yaml").write_text(text)
    port = free_port()
    process = start_litellm(workdir / "litellm.yaml", port, workdir / "litellm.log", env)
    _stack.callback(stop_litellm, process)
    _gateways[name] = Gateway(fake, workdir, process, port)
    return _gateways[name]


def stop_all() -> None:
    """At the session's end: every proxy stopped, then its fake, its files removed."""
    _gateways.clear()
    _stack.close()
