#!/bin/bash
# Device calls for contractions at every shape and the runtime's handle, in stages:
#   STAGES="shape tier memcheck" bash bench/device_every_shape.sh
#   STAGES="bench racecheck torch host" bash bench/device_every_shape.sh
# shape: the every-shape GPU tests; tier: the rest of the GPU tier (tests/torch_interop aside);
# torch: tests/torch_interop's GPU twins; memcheck/racecheck: compute-sanitizer over the
# examples at odd shapes; bench: bench/matmul.py's unaligned, small and default sets;
# host: bench/host_overhead.py; hostfast: the same and the runtime's GPU tests with
# PLAIT_CTYPES_LAUNCH=1; streamtests: the streamed attention tests, forward and backward;
# backward: bench/attention_backward.py; masks: bench/attention_masks.py (doctests: its GPU test); breakdown: bench/host_breakdown.py; backend: bench/torch_backend.py; compile: bench/compile_time.py. Logs and tables go to $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T="python3 -m pytest -q -p no:cacheprovider --ignore=tests/property"
for stage in ${STAGES:-shape tier memcheck}; do
  echo "== $stage $(date +%T)"
  case $stage in
    shape) timeout ${SHAPE_TIMEOUT:-200} $T -m gpu tests -k every_shape 2>&1 | tee "$OUT/every_shape.log" | tail -6 ;;
    tier) timeout ${TIER_TIMEOUT:-260} $T -m gpu tests --ignore=tests/torch_interop ${TIER_ARGS:-} -k "not every_shape" 2>&1 | tee "$OUT/gpu_tier.log" | tail -6 ;;
    torch) timeout ${TORCH_TIMEOUT:-240} $T -m gpu tests/torch_interop 2>&1 | tee "$OUT/torch.log" | tail -6 ;;
    memcheck|racecheck)
      extra=""; [ $stage = memcheck ] && extra="--report-api-errors no"
      timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool $stage $extra --error-exitcode 1 \
        python3 tests/gpu/sanitize_examples.py > "$OUT/$stage.log" 2>&1; echo "$stage rc=$?"
      tail -3 "$OUT/$stage.log" ;;
    bench) for set in ${SETS:-unaligned small default}; do
        timeout ${BENCH_TIMEOUT:-200} python3 bench/matmul.py --set $set --repeat ${REPEAT:-3} ${BENCH_ARGS:-} \
          --out "$OUT/matmul_$set.md" 2>&1 | tee "$OUT/bench_$set.log" | tail -8
      done ;;
    host) timeout 120 python3 bench/host_overhead.py --calls 2000 --repeats 7 2>&1 | tee "$OUT/host.log" | tail -14 ;;
    hostfast) PLAIT_CTYPES_LAUNCH=1 timeout 120 python3 bench/host_overhead.py --calls 2000 --repeats 7 2>&1 | tee "$OUT/host_ctypes.log" | tail -14
      PLAIT_CTYPES_LAUNCH=1 timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runtime tests/gpu/test_examples_gpu.py 2>&1 | tee "$OUT/ctypes_tests.log" | tail -4 ;;
    breakdown) timeout 90 python3 bench/host_breakdown.py 2>&1 | tee "$OUT/host_breakdown.log" | tail -14 ;;
    backend) timeout ${BACKEND_TIMEOUT:-150} python3 bench/torch_backend.py 2>&1 | tee "$OUT/torch_backend.log" | tail -8 ;;
    attention) timeout ${ATTN_TIMEOUT:-150} python3 bench/attention.py ${ATTN_ARGS:-} --out "$OUT/attention.md" 2>&1 | tee "$OUT/attention.log" | tail -20 ;;
    streamtests) timeout ${STREAM_TIMEOUT:-240} $T -m gpu tests/gpu/test_streaming_gpu.py tests/gpu/test_streaming_backward_gpu.py tests/gpu/test_attention_gpu.py tests/gpu/test_block_sparse_gpu.py 2>&1 | tee "$OUT/stream_tests.log" | tail -8 ;;
    backward) timeout ${ATTN_TIMEOUT:-150} python3 bench/attention_backward.py ${ATTN_ARGS:-} --out "$OUT/attention_backward.md" 2>&1 | tee "$OUT/attention_backward.log" | tail -20 ;;
    masks) timeout ${MASKS_TIMEOUT:-400} python3 bench/attention_masks.py ${MASKS_ARGS:-} --out "$OUT/attention_masks.md" 2>&1 | tee "$OUT/attention_masks.log" | grep -v "^  " | tail -30 ;;
    doctests) timeout 200 $T -m gpu tests/gpu/test_attention_gpu.py tests/gpu/test_streaming_gpu.py tests/gpu/test_streaming_backward_gpu.py -k document 2>&1 | tee "$OUT/doc_tests.log" | tail -4 ;;
    compile) timeout 90 python3 bench/compile_time.py 2>&1 | tee "$OUT/compile.log" | tail -6 ;;
  esac
done
