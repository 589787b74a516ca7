#!/bin/bash
# Normalization backward variants on the device: the GPU tests of the walked loop, then
# timings of schedule variants, then ncu stall reasons when NCU=1. Logs to stdout.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PLAIT_CACHE_DIR=/tmp/plait-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/install.log 2>&1
[ -z "$SKIP_TESTS" ] && timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_grads_gpu.py 2>&1 | tail -3
run() { timeout 60 python3 bench/profile_bwd.py $1 "$2" --time 2>&1 | tail -1; }
S="prefetch_into: shared"
for algo in layernorm rmsnorm; do
  run $algo ""
  for cfg in "{grid: {M: wave}, prefetch: 1, $S}" "{grid: {M: wave}, prefetch: 3, $S}" \
             "{grid: {M: 128}, prefetch: 2, $S}" "{grid: {M: wave}, prefetch: 2}"; do
    run $algo "$cfg"
  done
done
[ -z "$NCU" ] && exit 0
M=smsp__average_warps_issue_stalled
metrics=$(for r in barrier long_scoreboard short_scoreboard mio_throttle wait not_selected; do printf "%s_%s_per_issue_active.ratio," $M $r; done)
timeout 120 ncu --metrics ${metrics%,},gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed -k regex:layernorm_bwd$ -c 1 python3 bench/profile_bwd.py layernorm 2>&1 | grep -E "smsp__|gpu__|dram__" | sed 's/smsp__average_warps_issue_stalled_//'
