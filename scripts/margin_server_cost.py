"""One-off: what asking for logprobs costs the embedded model server, in one run.

Starts `reflexguard serve` on the embedded model (margins off, observe mode) and sends the
same request four times: a warm-up, without logprobs, with `logprobs: true,
top_logprobs: 5` (what `--margins on` adds), and without again; prints each wall time.

    .venv/bin/python scripts/margin_server_cost.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from record_margin_fixture import TOOLS  # noqa: E402

PORT = "18933"
ASK = "Cancel order #W123, I ordered it by mistake."


def ready() -> None:
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise SystemExit("the embedded model did not become ready in 10 minutes")


def main() -> int:
    log = (Path(tempfile.gettempdir()) / "margin_server_cost.log").open("w")
    server = subprocess.Popen([str(ROOT / ".venv/bin/reflexguard"), "serve", "--port", PORT,
                               "--repair", "off"], stdout=log, stderr=subprocess.STDOUT)
    try:
        ready()
        for label, extra in (("warm-up, no logprobs", {}), ("no logprobs", {}),
                             ("logprobs, top 5", {"logprobs": True, "top_logprobs": 5}),
                             ("no logprobs again", {})):
            body = {"model": "embedded", "temperature": 0, "max_tokens": 96, "tools": TOOLS,
                    "messages": [{"role": "user", "content": ASK}], **extra}
            request = urllib.request.Request(
                f"http://127.0.0.1:{PORT}/v1/chat/completions", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"})
            began = time.perf_counter()
            with urllib.request.urlopen(request, timeout=900) as response:
                answer = json.loads(response.read())
            print(f"{label}: {time.perf_counter() - began:.1f} s, "
                  f"{answer['usage']['completion_tokens']} tokens", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
