#!/usr/bin/env bash
# Set up, fetch the embedded model, then run the whole suite (real-model tests included).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
# BFCL's harness in its own virtualenv, for tests/bench/bfcl (docs/bench.md, "BFCL").
bash scripts/setup_bfcl.sh
.venv/bin/reflexguard model fetch
# Does this machine run the llama.cpp build (each cached variant, in a subprocess)?
.venv/bin/reflexguard model doctor
.venv/bin/ruff check .
.venv/bin/mypy
# The rooms stay rooms: layers, no I/O in the core, nothing imports cli, no cycles.
.venv/bin/lint-imports
.venv/bin/python -m pytest "$@"
