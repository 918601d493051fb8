#!/usr/bin/env bash
# The streaming benchmark on the many-core device (issue 23): wheels from .devperf/whl, the code as
# git archive of HEAD (.devperf/h4/src) and of fbd9e55 (.devperf/h4/old, --against).
set -o pipefail
export PYTHONUNBUFFERED=1
L=$OUT/log.txt
{ echo "== $(nproc) cores; commit $(cat .devperf/h4/src/COMMIT)"; lscpu | grep -iE 'model name|^cpu\(s\)'
  echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo none)"; python3 --version
  python3 -c "import aiohttp; print('aiohttp', aiohttp.__version__)"; echo "load: $(cat /proc/loadavg)"; } 2>&1 | tee "$L"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .devperf/whl/*.whl 2>&1 | grep -v WARNING | tee -a "$L"
export PYTHONPATH=/tmp/site
cd .devperf/h4/src || exit 3
echo "== gap 0: c=1 and c=50" | tee -a "$L"
BENCH_STREAM_JSON=$OUT/stream.json timeout -k 10 ${T1:-290} python3 -m bench.overhead --stream \
  --requests ${REQ:-600} --rounds 3 --concurrency 1 50 --against ../old 2>&1 | tee -a "$L"
echo "== gap 0.5 ms: c=1; load: $(cat /proc/loadavg)" | tee -a "$L"
BENCH_STREAM_JSON=$OUT/gap.json timeout -k 10 ${T2:-270} python3 -m bench.overhead --stream \
  --requests ${GREQ:-40} --rounds 2 --concurrency 1 --gap-ms 0.5 --against ../old 2>&1 | tee -a "$L"
echo "== load after: $(cat /proc/loadavg)" | tee -a "$L"
