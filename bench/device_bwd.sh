#!/bin/bash
# One device call for the backward work: install, the GPU tier (optionally filtered:
# $1 = pytest -k expression; SKIP_TESTS=1 skips it), then bench/backward.py with its
# schedule variants (ONLY= picks workloads). Logs go to $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
if [ -z "$SKIP_TESTS" ]; then
  timeout ${TEST_TIMEOUT:-330} python3 -m pytest -q -x -p no:cacheprovider tests/gpu ${1:+-k "$1"} 2>&1 | tee "$OUT/gpu_tests.log" | tail -8
fi
timeout ${BENCH_TIMEOUT:-240} python3 bench/backward.py --variants ${ONLY:+--only "$ONLY"} --out "$OUT/results_backward.md" 2>&1 | tee "$OUT/backward.log" | grep -v "^\s*$" | tail -40
