#!/bin/bash
# One device call: install, GPU tier (optionally filtered: $1 = pytest -k expression),
# then the forward and backward benchmarks. Logs and tables go to $OUT.
#   bash bench/device_check.sh                 # everything
#   NO_BENCH=1 bash bench/device_check.sh gpu  # tests only
#   VARIANTS=1 ONLY=rmsnorm bash bench/device_check.sh grads   # backward schedule variants
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
(cd /tmp && python3 -c "import plait.runtime.driver as d; print('gpu', d.gpu_available(), d.device_capability())")
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider tests/gpu ${1:+-k "$1"} 2>&1 | tee "$OUT/gpu_tests.log" | tail -8
if [ -z "$NO_BENCH" ]; then
  timeout ${BENCH_TIMEOUT:-150} python3 bench/memory_bound.py --out "$OUT/results_memory.md" 2>&1 | tee "$OUT/bench.log" | tail -8
  timeout ${BWD_TIMEOUT:-${BENCH_TIMEOUT:-150}} python3 bench/backward.py ${VARIANTS:+--variants} ${ONLY:+--only "$ONLY"} --out "$OUT/results_backward.md" 2>&1 | tee "$OUT/backward.log" | tail -9
fi
