#!/usr/bin/env bash
# Installs Debian's redis-server where `command -v redis-server` fails: the session-state
# tests start a real one (docs/scaling.md), and fail, not skip, without it.
# Root runs apt-get itself; anyone else goes through sudo; neither is a clear error.
set -euo pipefail

if command -v redis-server > /dev/null 2>&1; then
  echo "setup: redis-server: $(command -v redis-server)"
  exit 0
fi
if ! command -v apt-get > /dev/null 2>&1; then
  echo "setup: redis-server is missing and there is no apt-get: install Redis (7 or newer)" \
    "so that redis-server is on PATH" >&2
  exit 2
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo > /dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup: redis-server is missing; run as root or install sudo, or" \
    "\`apt-get install -y redis-server\` yourself" >&2
  exit 2
fi
echo "setup: redis-server: installing Debian's package"
# `env`: sudo resets the environment, so the variable is set on the far side of it.
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server
command -v redis-server > /dev/null 2>&1 \
  || { echo "setup: apt-get installed redis-server but it is not on PATH" >&2; exit 2; }
