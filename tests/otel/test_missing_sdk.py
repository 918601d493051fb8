"""`otel: on` where OpenTelemetry is not installed: `reflexguard serve` says so in one line
with the install command and exits non-zero, as every other user mistake does (issue 34:
the bench's serve child on a machine without the wheels died with a traceback)."""

from __future__ import annotations

import subprocess
import sys

# Blocks every `opentelemetry` import, as a machine without the wheels would, then runs the
# real command line.
WITHOUT_OTEL = """
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Missing())
for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
    del sys.modules[name]
from reflexguard.cli.main import main
sys.argv = ["reflexguard", "serve", "--upstream", "http://127.0.0.1:9/v1", "--otel", "on",
            "--port", "0"]
main()
"""


def test_serve_with_otel_on_and_no_sdk_is_one_line_and_non_zero() -> None:
    run = subprocess.run([sys.executable, "-c", WITHOUT_OTEL], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode != 0
    lines = [line for line in run.stderr.strip().splitlines() if line]
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert "reflexguard[otel]" in lines[0] and "opentelemetry" in lines[0]
