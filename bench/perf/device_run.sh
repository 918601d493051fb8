#!/usr/bin/env bash
# One call on the 16-core machine (issue 34; docs/performance.md): reflexguard's runtime
# dependencies as cp312 wheels in .devperf/whl, this tree's code in .devperf/src and, for
# before/after, an earlier tree in .devperf/old (`git archive` of one commit each). Runs the
# benchmarks named in RUNS (default: capacity), each log and JSON under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
L=$OUT/log.txt
{ echo "== $(nproc) cores; src $(cat .devperf/src/COMMIT 2>/dev/null) old $(cat .devperf/old/COMMIT 2>/dev/null)"
  lscpu | grep -iE 'model name|^cpu\(s\)|thread'; python3 --version
  python3 -c "import aiohttp; print('aiohttp', aiohttp.__version__)"; echo "load: $(cat /proc/loadavg)"
} 2>&1 | tee "$L"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .devperf/whl/*.whl 2>&1 | grep -v WARNING | tee -a "$L"
export PYTHONPATH=/tmp/site
OLD=$PWD/.devperf/old
cd .devperf/src || exit 3
python3 -c "import reflexguard.http.app, reflexguard.cli.serve, bench.overhead, bench.capacity; print('imports ok')" 2>&1 | tee -a "$L" || exit 4
step() {  # step NAME SECONDS COMMAND...: one benchmark, its own log, bounded
  local name=$1 limit=$2; shift 2
  echo "== $name: $*" | tee -a "$L"
  timeout -k 10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  echo "== $name rc $? load $(cat /proc/loadavg)" | tee -a "$L"
}
for run in ${RUNS:-capacity}; do
  case $run in
    capacity) step capacity "${CAP_TIMEOUT:-480}" python3 -m bench.capacity --workers 1 4 \
        --concurrency ${CAP_CONC:-50 200 1000 2000} --warm 1 --duration ${CAP_DURATION:-4} \
        --load-processes 5 --upstream-processes 4 --json "$OUT/capacity.json" ;;
    stream) step stream "${STREAM_TIMEOUT:-240}" env BENCH_STREAM_JSON="$OUT/stream.json" \
        python3 -m bench.overhead --stream --concurrency 1 50 --requests 300 --rounds 3 \
        --against "$OLD" ;;
    workers) step workers "${WORKERS_TIMEOUT:-300}" python3 -m bench.overhead --workers 1 2 4 8 \
        --tools 15 --load-processes 6 --upstream-processes 4 --concurrency 256 --rounds 3 \
        --duration 4 --requests 100000000 --against "$OLD" --json "$OUT/workers.json" ;;
    plain) step plain "${PLAIN_TIMEOUT:-240}" python3 -m bench.overhead --tools 15 \
        --concurrency 1 50 256 --requests 3000 --rounds 5 --against "$OLD" ;;
    dialects) for d in messages responses; do
        step "dialect-$d" 120 python3 -m bench.overhead --dialect "$d" --concurrency 50 \
          --requests 3000 --rounds 3 --against "$OLD"; done ;;
    otel) step otel 180 python3 -m bench.overhead --otel on --tools 15 --concurrency 50 \
        --requests 3000 --rounds 3 --against "$OLD" ;;
  esac
done
echo "== done; load $(cat /proc/loadavg)" | tee -a "$L"
