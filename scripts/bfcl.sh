#!/usr/bin/env bash
# Set up (reflexguard's .venv, then BFCL's own .venv-bfcl), then run the default BFCL bench:
# the embedded model at Q4_K_M and Q2_K, repair off and on, BFCL's single-turn non-live
# categories, a fixed seeded sample of 6 cases each: about 25 minutes on the shared 2-core
# machine (80 cases took 16.7 min, docs/bench.md, "BFCL"). Multi-turn is left to explicit
# runs: one case took 10-15 minutes per cell and arm here. Extra arguments go to bench.bfcl
# (e.g. --limit 20, --categories ... multi_turn_base --multi-turn-limit 1, --out runs/X).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/setup_bfcl.sh
.venv/bin/reflexguard model fetch
exec .venv/bin/python -m bench.bfcl --categories simple_python multiple parallel \
  parallel_multiple irrelevance --limit 6 --model-threads 1 --parallel-cells "$@"
