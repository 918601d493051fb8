"""The upstream is shown the same way everywhere: the `listening` line and /healthz name the
base URL requests go to (`/v1` added to a bare host), without credentials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from reflexguard.core.urls import upstream_base
from reflexguard.http.upstream import Upstream
from reflexguard.ops.loopback import free_port


@pytest.mark.parametrize("url", [
    "http://h:8000", "http://h:8000/v1", "http://u:p@h:8000", "http://u:p@h:8000/v1",
    "https://api.example.com/openai/v1", "http://[::1]:8000", "http://u@[::1]:8000/v1",
])
def test_the_shown_base_is_the_one_the_client_sends_to(url: str) -> None:
    assert upstream_base(url) == Upstream(url).base_url


def test_listening_and_healthz_show_the_same_upstream() -> None:
    port = free_port()
    upstream = f"http://agent:s3cret@127.0.0.1:{free_port()}"  # no /v1, with credentials
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("REFLEXGUARD_")}
    process = subprocess.Popen([sys.executable, "-m", "reflexguard", "serve", "--upstream",
                                upstream, "--port", str(port)], stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, env=env)
    try:
        assert process.stderr is not None
        listening = None
        for raw in process.stderr:  # the log is JSON lines; `listening` comes once bound
            line = json.loads(raw)
            if line.get("event") == "listening":
                listening = line
                break
        assert listening is not None
        healthz = None
        deadline = time.monotonic() + 30
        while healthz is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    healthz = json.loads(r.read())
            except OSError:
                time.sleep(0.1)
        assert healthz is not None
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    expected = upstream.replace("agent:s3cret@", "") + "/v1"
    assert listening["upstream"] == healthz["upstream"] == expected
