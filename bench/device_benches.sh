#!/bin/bash
# One device call of timings: each bench module of $BENCHES (default below) in turn, then
# again while time is left, so the table's spread over repeated runs comes from one machine.
#   BENCHES="gated_mlp argmax" DEADLINE=450 bash bench/device_benches.sh
# Each run has PER_BENCH seconds; no run starts after DEADLINE seconds. Logs go to $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
start=$(date +%s)
for round in 1 2 3; do
  for b in ${BENCHES:-gated_mlp argmax topk scan dropout}; do
    left=$(( ${DEADLINE:-450} - ($(date +%s) - start) ))
    [ $left -lt 30 ] && break 2
    per=${PER_BENCH:-150}; [ $per -gt $left ] && per=$left
    echo "== $b round $round $(date +%T)"
    timeout -s INT -k 10 $per python3 bench/$b.py > "$OUT/${b}_$round.log" 2>&1
    echo "rc=$?"; tail -${TAIL:-14} "$OUT/${b}_$round.log"
  done
done
