#!/bin/bash
# Normalization backward variants on the device: the GPU tests of the walked loop, then
# timings of schedule variants (PLAIT_ACC_REGS: accumulator words a thread may keep in
# registers), then ncu stall reasons when NCU=1.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/install.log 2>&1
[ -z "$SKIP_TESTS" ] && timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_grads_gpu.py 2>&1 | tail -3
run() {  # acc_regs algo schedule
  PLAIT_CACHE_DIR=/tmp/plait-cache-$1 PLAIT_ACC_REGS=$1 timeout 60 python3 bench/profile_bwd.py $2 "$3" --time 2>&1 | tail -1
}
S="prefetch_into: shared"
for acc in 8 32 64; do for pf in 2 3; do run $acc layernorm "{grid: {M: 125}, prefetch: $pf, $S}"; done; done
run 64 layernorm "{grid: {M: 125}, prefetch: 4, $S}"
run 64 layernorm "{grid: {M: 64}, prefetch: 3, $S}"
run 32 layernorm "{grid: {M: 125}, prefetch: 1}"
for acc in 8 32; do for pf in 2 3; do run $acc rmsnorm "{grid: {M: 125}, prefetch: $pf, $S}"; done; done
run 8 rmsnorm "{grid: {M: 64}, occupancy: 2, prefetch: 2, $S}"
run 8 rmsnorm "{grid: {M: 64}, occupancy: 2, prefetch: 1}"
[ -z "$NCU" ] && exit 0
M=smsp__average_warps_issue_stalled
metrics=$(for r in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle math_pipe_throttle wait not_selected selected no_instruction dispatch_stall drain; do printf "%s_%s_per_issue_active.ratio," $M $r; done)
echo "=== stalls acc=64 pf=3 shared"
PLAIT_CACHE_DIR=/tmp/plait-cache-64 PLAIT_ACC_REGS=64 timeout 120 ncu --metrics ${metrics%,},smsp__inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed -k regex:layernorm_bwd$ -c 1 python3 bench/profile_bwd.py layernorm "{grid: {M: 125}, prefetch: 3, $S}" 2>&1 | grep -E "smsp__|gpu__|dram__" | sed 's/smsp__average_warps_issue_stalled_//'
