#!/bin/bash
# One device call for contractions at every shape: install, the GPU tier (the new
# every-shape tests first), then memcheck and racecheck over the examples at odd shapes.
#   bash bench/device_every_shape.sh            # tests and sanitizers
#   BENCH=1 bash bench/device_every_shape.sh    # the matmul benchmarks instead
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ -n "$BENCH" ]; then
  for set in unaligned small default; do
    timeout ${BENCH_TIMEOUT:-200} python3 bench/matmul.py --set $set --repeat ${REPEAT:-3} \
      --out "$OUT/matmul_$set.md" 2>&1 | tee "$OUT/bench_$set.log" | tail -9
  done
  exit 0
fi
T="timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider --ignore=tests/property"
$T -m gpu tests -k "every_shape" 2>&1 | tee "$OUT/every_shape.log" | tail -6
$T -m gpu tests -k "not every_shape" 2>&1 | tee "$OUT/gpu_tier.log" | tail -6
for tool in memcheck racecheck; do
  extra=""; [ $tool = memcheck ] && extra="--report-api-errors no"
  timeout ${SAN_TIMEOUT:-120} compute-sanitizer --tool $tool $extra --error-exitcode 1 \
    python3 tests/gpu/sanitize_examples.py > "$OUT/$tool.log" 2>&1; echo "$tool rc=$?"
  tail -3 "$OUT/$tool.log"
done
