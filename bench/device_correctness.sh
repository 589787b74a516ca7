#!/bin/bash
# Device calls for correctness (no timings): the GPU tier, compute-sanitizer over every example
# and gradient, and the fuzzer on the machine's CPU cores while the GPU works.
#   STAGES="fuzz tier memcheck" bash bench/device_correctness.sh
#   STAGES="fuzz racecheck synccheck torch" FUZZ_KIND=grad bash bench/device_correctness.sh
# fuzz: tools/fuzz.py in the background on all but two cores (FUZZ_WORKERS, FUZZ_CASES, FUZZ_KIND,
# FUZZ_SEED, FUZZ_SECONDS),
# waited for at the end; tier: tests -m gpu (tests/torch_interop aside; TIER_PATHS narrows it);
# torch: its GPU twins (TORCH_PATHS narrows them); pytest gets SIGINT at its timeout, so the
# failures so far are still reported;
# memcheck/racecheck/synccheck: tests/gpu/sanitize_examples.py under that tool ($SAN_ONLY picks
# algorithms, $SAN_ARGS adds arguments: SAN_ARGS="--size G=3 --size R=5" keeps racecheck of
# grouped-query attention inside its time). FUZZ_KIND=tc or tc-grad fuzzes tensor-core
# programs. Carry .whl (hypothesis and sortedcontainers for the fuzzer, fetched as the device's
# README says) with the call. Logs go to $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
[ -d .whl ] && python3 -m pip install -q --no-deps .whl/*.whl >> "$OUT/install.log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T="python3 -m pytest -q -p no:cacheprovider --ignore=tests/property"
fuzz_pid=""
for stage in ${STAGES:-fuzz tier memcheck}; do
  echo "== $stage $(date +%T)"
  case $stage in
    fuzz)
      workers=${FUZZ_WORKERS:-$(( $(nproc) - 2 ))}
      # Stops sending cases after FUZZ_SECONDS and prints its summary; the timeout is a backstop.
      timeout ${FUZZ_TIMEOUT:-570} python3 tools/fuzz.py --cases ${FUZZ_CASES:-10000} \
        --seconds ${FUZZ_SECONDS:-480} --timeout ${FUZZ_CASE_TIMEOUT:-60} \
        --workers $workers --kind ${FUZZ_KIND:-forward} --seed ${FUZZ_SEED:-0} \
        > "$OUT/fuzz_${FUZZ_KIND:-forward}.log" 2>&1 &
      fuzz_pid=$! ;;
    tier) timeout -s INT -k 20 ${TIER_TIMEOUT:-300} $T -v -m gpu ${TIER_PATHS:-tests} --ignore=tests/torch_interop --ignore=tests/gpu/test_sanitizer_gpu.py ${TIER_ARGS:-} > "$OUT/gpu_tier.log" 2>&1; echo "tier rc=$?"; grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_tier.log" | tail -25 ;;
    torch) timeout -s INT -k 20 ${TORCH_TIMEOUT:-200} $T -v -m gpu ${TORCH_PATHS:-tests/torch_interop} > "$OUT/torch.log" 2>&1; echo "torch rc=$?"; grep -E "FAILED|ERROR|passed|failed" "$OUT/torch.log" | tail -25 ;;
    memcheck|racecheck|synccheck)
      extra=""; [ $stage = memcheck ] && extra="--report-api-errors no"
      timeout ${SAN_TIMEOUT:-200} compute-sanitizer --tool $stage $extra --error-exitcode 1 \
        python3 tests/gpu/sanitize_examples.py ${SAN_ONLY:+--only $SAN_ONLY} ${SAN_ARGS:-} \
        > "$OUT/$stage.log" 2>&1
      echo "$stage rc=$?"; grep -E "ERROR SUMMARY|FAIL|sanitize_examples:" "$OUT/$stage.log" | tail -12 ;;
  esac
done
if [ -n "$fuzz_pid" ]; then
  echo "== waiting for the fuzzer $(date +%T)"; wait $fuzz_pid; echo "fuzz rc=$?"
  grep -E "^fuzz:|FAIL|CRASH|HANG" "$OUT/fuzz_${FUZZ_KIND:-forward}.log" | tail -15
fi
