set -o pipefail
export PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/install.log 2>&1
for cfg in "{grid: {M: 125}, prefetch: 2}" "{grid: {M: 64}, occupancy: 2, prefetch: 0}"; do
  echo "=== $cfg"
  timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section SchedulerStats -k regex:layernorm_bwd$ -c 1 python3 bench/profile_bwd.py layernorm "$cfg" 2>&1 | grep -v "^==PROF==" | grep -E "^\s+[A-Z].*\s[0-9.,]+$|Stall|stall|cycles|Throughput|Occupancy|Warp" | head -70
done
