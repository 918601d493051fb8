#!/usr/bin/env bash
# Set up, then put reflexguard in front of the embedded quantized model on the CPU.
# Extra arguments go to `reflexguard serve` (e.g. --upstream http://127.0.0.1:8000/v1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
exec .venv/bin/reflexguard serve "$@"
