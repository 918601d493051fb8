#!/usr/bin/env bash
# The many-core run of `bench.overhead --workers 1 2 4 8` (issue 23), on a machine with no
# registry: reflexguard's runtime dependencies as cp312 wheels in .devperf/whl, the code as
# `git archive` of one commit in .devperf/src (see docs/performance.md, "Many cores").
# Writes $OUT/log.txt and $OUT/results.json.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/many-core-out}
mkdir -p "$OUT"
L=$OUT/log.txt
{ echo "== $(nproc) cores; commit $(cat .devperf/src/COMMIT)"; lscpu | grep -iE 'model name|^cpu\(s\)|thread|socket'
  echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo none)"; python3 --version
  python3 -c "import aiohttp; print('aiohttp', aiohttp.__version__)"; echo "load: $(cat /proc/loadavg)"
} 2>&1 | tee "$L"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .devperf/whl/*.whl 2>&1 | grep -v WARNING | tee -a "$L"
export PYTHONPATH=/tmp/site
cd .devperf/src || exit 3
python3 -c "import reflexguard.http.app, reflexguard.cli.serve, bench.overhead; print('imports ok')" 2>&1 | tee -a "$L" || exit 4
timeout -k 15 ${MANY_TIMEOUT:-520} python3 -m bench.overhead --workers 1 2 4 8 --tools 15 \
  --load-processes ${LOAD_PROCS:-6} --upstream-processes ${UPSTREAM_PROCS:-4} \
  --concurrency 1 ${CONC:-256} --rounds ${ROUNDS:-3} --duration ${DURATION:-4} \
  --requests 100000000 --json "$OUT/results.json" 2>&1 | tee -a "$L"
rc=$?
echo "== load after: $(cat /proc/loadavg); rc $rc" | tee -a "$L"
cp /tmp/bench-load.err "$OUT/load.err" 2>/dev/null
exit $rc
