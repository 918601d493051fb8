#!/usr/bin/env bash
# `bench.perf.spy_workers` on the many-core machine (issue 23): the environment (where the
# metrics files live, the caches), then N workers of the minimal and of reflexguard, with a
# variant whose metrics files are on tmpfs and one with CPython's default young-GC threshold.
# The code is `git archive` of one commit in $SRC (default .devperf/src, with a COMMIT file),
# the cp312 wheels in .devperf/whl, py-spy (a static binary) in .devperf/bin; as in
# many_core_run.sh. Writes $OUT/env.txt, $OUT/log.txt and $OUT/spy.tgz (the raw samples).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/spy-workers-out}
SRC=${SRC:-.devperf/src}
mkdir -p "$OUT"
{ echo "cores $(nproc); commit $(cat "$SRC/COMMIT")"; df -T /tmp /dev/shm
  stat -f -c '%n %T' /tmp /dev/shm; python3 --version; cat /proc/loadavg
  lscpu | grep -iE 'model name|cache|numa'; } 2>&1 | tee "$OUT/env.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .devperf/whl/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site PATH=$PWD/.devperf/bin:$PATH
rm -rf /tmp/gc700 && cp -r "$SRC" /tmp/gc700 && sed -i \
  's/^YOUNG_GENERATION_THRESHOLD = 50_000/YOUNG_GENERATION_THRESHOLD = 700/' \
  /tmp/gc700/reflexguard/http/app.py
grep -c "^YOUNG_GENERATION_THRESHOLD = 700" /tmp/gc700/reflexguard/http/app.py || exit 3
cd "$SRC" || exit 3
timeout -k 10 "${SPY_TIMEOUT:-200}" python3 -m bench.perf.spy_workers --workers "${N:-8}" \
  --seconds "${SECS:-5}" --rounds "${ROUNDS:-1}" --out /tmp/spy \
  --variant shm=TMPDIR=/dev/shm \
  --variant gc700=PYTHONSAFEPATH=1,PYTHONPATH=/tmp/gc700:/tmp/site 2>&1 | tee "$OUT/log.txt"
rc=$?
(cd /tmp && tar czf "$OUT/spy.tgz" spy)
exit $rc
