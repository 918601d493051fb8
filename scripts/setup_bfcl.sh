#!/usr/bin/env bash
# A separate virtualenv for BFCL's harness (bfcl-eval), idempotently: .venv-bfcl.
# bfcl-eval pins numpy==1.26.4 and imports a dozen provider SDKs, none of which may enter the
# environment reflexguard is tested in (.venv); bench.bfcl runs BFCL's own CLI from here as a
# subprocess, pointed at reflexguard (docs/bench.md, "BFCL"). 3.3 minutes from an empty venv on
# the busy 2-core machine (pip cache warm), 564 MB.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

python_bin="${PYTHON:-python3}"
venv=.venv-bfcl
# The exact list, hashed: a changed pin reinstalls; an unchanged one is a no-op.
want="$(sha256sum requirements/bfcl.txt | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/requirements-sha256" 2>/dev/null)" = "$want" ]; then
  echo "setup_bfcl: ready ($venv, requirements/bfcl.txt unchanged)"
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q pip==25.3
# --no-deps: the list is complete and exact; bfcl-eval's own metadata would pull
# sentence-transformers and faiss-cpu (and with them torch), which this path never imports.
"${pip[@]}" install -q --no-deps -r requirements/bfcl.txt
# The import path bench.bfcl uses: the CLI (every handler) and the checker.
"$venv/bin/python" -c "import bfcl_eval.__main__, bfcl_eval.eval_checker.eval_runner"
printf '%s\n' "$want" > "$venv/requirements-sha256"
echo "setup_bfcl: ready ($venv)"
