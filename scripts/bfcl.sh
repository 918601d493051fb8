#!/usr/bin/env bash
# Set up (reflexguard's .venv, then BFCL's own .venv-bfcl), then run the default BFCL bench:
# the embedded model at Q4_K_M and Q2_K, repair off and on, BFCL's non-live categories,
# a fixed seeded sample of 5 cases per single-turn category and 1 per multi-turn one
# (docs/bench.md, "BFCL"). Extra arguments go to bench.bfcl (e.g. --limit 20, --out runs/X).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/setup_bfcl.sh
.venv/bin/reflexguard model fetch
exec .venv/bin/python -m bench.bfcl --limit 5 --multi-turn-limit 1 --model-threads 1 "$@"
