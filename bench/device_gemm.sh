#!/bin/bash
# One device call for contractions: install, the contraction GPU tests, the SASS of the
# shipped matmul kernel (HGMMA count), then the matmul benchmark. Logs go to $OUT.
#   bash bench/device_gemm.sh [pytest -k expression]      QUICK=1 for the short benchmark
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for ex in matmul matmul_fp8; do
  dt=bf16; [ $ex = matmul_fp8 ] && dt=fp8_e4m3
  plait compile examples/$ex.py --target sm_90a --shape M=4096,N=4096,K=4096 --dtype $dt --dump /tmp/dump_$ex > /dev/null 2>&1
  ptxas -arch=sm_90a -v /tmp/dump_$ex/05_ptx.ptx -o /tmp/$ex.cubin 2>&1 | grep -E "registers|spill|warn" 
  echo "$ex SASS: $(cuobjdump --dump-sass /tmp/$ex.cubin | grep -cE 'HGMMA|QGMMA') GMMA instructions, $(cuobjdump --dump-sass /tmp/$ex.cubin | grep -oE '[HQ]GMMA\.[0-9A-Z.x]+' | sort -u | head -2 | tr '\n' ' ')"
done
PLAIT_SYNC=1 timeout 60 python3 bench/gemm_smoke.py 2>&1 | tee "$OUT/smoke.log" | tail -12 || exit 1
TESTS=${TESTS:-tests/gpu/test_contraction_gpu.py}; [ -n "$FULL_GPU" ] && TESTS=tests/gpu
timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider $TESTS ${1:+-k "$1"} 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
if [ -n "$VARIANTS" ]; then
  timeout 200 python3 bench/matmul_variants.py 2>&1 | tee "$OUT/variants.log" | tail -40
fi
[ -n "$HOST" ] && timeout 90 python3 bench/host_overhead.py 2>&1 | tee "$OUT/host.log" | head -45
if [ -z "$NO_BENCH" ]; then
  timeout ${BENCH_TIMEOUT:-300} python3 bench/matmul.py ${QUICK:+--quick} --out "$OUT/results_matmul.md" 2>&1 | tee "$OUT/bench.log" | tail -14
fi
