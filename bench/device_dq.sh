#!/bin/bash
# One device call for dq added up in the dk/dv kernel: its GPU tests, the tile variants
# side by side, the backward against FA2 and cuDNN, and the LLaMA block against inductor.
set -o pipefail
export PYTHONUNBUFFERED=1 PLAIT_CACHE_DIR=/tmp/plait-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
T="python3 -m pytest -q -p no:cacheprovider"
echo "== tests $(date +%T)"
timeout 200 $T -m gpu tests/gpu/test_streaming_backward_gpu.py tests/gpu/test_attention_gpu.py "tests/torch_interop/test_torch_op_gpu.py" -k "backward or attention or rows_past" 2>&1 | tee "$OUT/tests.log" | tail -5
echo "== variants $(date +%T)"
timeout 200 python3 bench/attention_backward_variants.py 2>&1 | tee "$OUT/variants.log" | grep -v "^ *kernel.*0.0000" | tail -40
echo "== backward $(date +%T)"
timeout 240 python3 bench/attention_backward.py --repeat 2 --out "$OUT/attention_backward.md" 2>&1 | tee "$OUT/backward.log" | tail -22
echo "== backend $(date +%T)"
timeout 150 python3 bench/torch_backend.py 2>&1 | tee "$OUT/torch_backend.log" | tail -10
echo "== done $(date +%T)"
