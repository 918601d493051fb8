#!/usr/bin/env bash
# Set up, then run the default bench: tau2's mock domain through reflexguard on the
# embedded model at Q4_K_M and Q2_K, repair off and on. Extra arguments go to
# bench.compare (e.g. --retail-subset, --out runs/NAME).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
exec .venv/bin/python -m bench.compare --repair all "$@"
