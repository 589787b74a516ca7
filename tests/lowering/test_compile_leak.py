"""Compiling keeps no memory per program: a process that compiles distinct programs (a
tuning run, torch.compile) must not grow with their number. tools/compile_leak.py runs
the full measurement (1,000 compiles of a wider mix)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# compile_program itself (no run or disk cache in the way), one distinct size per compile.
SCRIPT = """
import gc, json, sys
sys.path.insert(0, sys.argv[1])
from plait.dsl import DType
from plait.lowering.pipeline import compile_program
from softmax import softmax

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

graph = softmax.graph({"x": DType.FP32})
warm, count = int(sys.argv[2]), int(sys.argv[3])
for n in range(warm + count):
    compile_program(graph, None, {"M": 7, "N": 33 + n}, True, "sm_90a")
    if n + 1 == warm:
        gc.collect()
        start = rss_kb()
gc.collect()
print(json.dumps({"start": start, "end": rss_kb()}))
"""


def test_rss_stays_flat_over_distinct_compiles(tmp_path):
    warm, count = 60, 200
    env = dict(os.environ, PLAIT_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "examples"), str(warm),
                           str(count)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    rss = json.loads(done.stdout.strip().splitlines()[-1])
    per_compile = (rss["end"] - rss["start"]) / count
    # Before: about 500 KB a compile (every emitter kept alive, then llvmlite's pass builder
    # at about 90 KB); now a few KB while the allocator's pools fill, then flat.
    assert per_compile < 30, f"{per_compile:.1f} KB a compile ({rss})"
