#!/bin/bash
# Normalization backward variants on the device: timings, then ncu stall reasons.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/install.log 2>&1
run() {  # acc_regs algo schedule
  PLAIT_CACHE_DIR=/tmp/plait-cache-$1 PLAIT_ACC_REGS=$1 timeout 60 python3 bench/profile_bwd.py $2 "$3" --time 2>&1 | tail -1
}
for acc in 8 32 64; do for cfg in "{grid: {M: 125}, prefetch: 1}" "{grid: {M: 125}, prefetch: 2}"; do run $acc layernorm "$cfg"; done; done
run 64 layernorm "{grid: {M: 125}, prefetch: 0}"
run 64 layernorm "{grid: {M: 64}, prefetch: 1}"
run 8 rmsnorm "{grid: {M: 64}, occupancy: 2, prefetch: 1}"
for cfg in "{grid: {M: 125}, prefetch: 1}" "{grid: {M: 125}, prefetch: 2}" "{grid: {M: 64}, prefetch: 2}"; do run 32 rmsnorm "$cfg"; done
M=smsp__average_warps_issue_stalled
metrics=$(for r in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle math_pipe_throttle wait not_selected selected no_instruction dispatch_stall drain; do printf "%s_%s_per_issue_active.ratio," $M $r; done)
for acc in 8 64; do
  echo "=== stalls acc=$acc"
  PLAIT_CACHE_DIR=/tmp/plait-cache-$acc PLAIT_ACC_REGS=$acc timeout 120 ncu --metrics ${metrics%,},smsp__inst_executed.sum,gpu__time_duration.sum -k regex:layernorm_bwd$ -c 1 python3 bench/profile_bwd.py layernorm "{grid: {M: 125}, prefetch: $([ $acc = 8 ] && echo 2 || echo 1)}" 2>&1 | grep -E "smsp__|gpu__" | sed 's/smsp__average_warps_issue_stalled_//'
done
