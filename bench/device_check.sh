#!/bin/bash
# One device call: install, GPU tier (subset via $1 = pytest -k expression), bench.
# Logs go to $OUT (the device tool brings them back).
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
cd /tmp && python3 -c "import plait.runtime.driver as d; print('gpu', d.gpu_available(), d.device_capability())"; cd - >/dev/null
if [ -n "$1" ]; then
  timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -x -p no:cacheprovider tests/gpu -k "$1" 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
fi
if [ -z "$NO_BENCH" ]; then
  timeout ${BENCH_TIMEOUT:-300} python3 bench/memory_bound.py --out "$OUT/results_memory.md" 2>&1 | tee "$OUT/bench.log" | tail -30
fi
