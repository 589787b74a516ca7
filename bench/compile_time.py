"""Cold compile time of a GEMM, in its two parts, median over repeats (no cache hit):

    python bench/compile_time.py [--repeat 5]

`lower+llvm`: plait's stages down to PTX (compile_program); `driver JIT`: the driver
assembling that PTX for the GPU (cuModuleLoadDataEx). Issue 11's floor is 0.3 s in all.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))
from plait.dsl import DType  # noqa: E402
from plait.lowering.pipeline import compile_program  # noqa: E402
from plait.runtime import driver  # noqa: E402

from matmul import matmul  # noqa: E402
from matmul_bias_gelu import matmul_bias_gelu  # noqa: E402

CASES = [(matmul, {"M": 4096, "N": 4096, "K": 4096}), (matmul, {"M": 4096, "N": 4095, "K": 4096}),
         (matmul, {"M": 512, "N": 512, "K": 512}), (matmul_bias_gelu, {"M": 4096, "N": 4096, "K": 4096})]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    target = "sm_90a"
    print("| kernel | lower+llvm s | driver JIT s | total s |\n|---|---|---|---|")
    for algo, sizes in CASES:
        graph = algo.graph({p.name: DType.BF16 for p in algo.tensor_params})
        lowering, jit = [], []
        for i in range(args.repeat):
            start = time.perf_counter()
            program = compile_program(graph, None, sizes, True, target)
            lowering.append(time.perf_counter() - start)
            start = time.perf_counter()
            for k in program.kernels:   # a distinct text: no hit in plait's or the driver's cache
                driver.load_module(k.ptx + f"\n// compile_time repeat {i} {time.time()}\n", k.name)
            jit.append(time.perf_counter() - start)
        lo, jt = statistics.median(lowering), statistics.median(jit)
        name = f"{algo.name} {'x'.join(str(v) for v in sizes.values())}"
        print(f"| {name} | {lo:.3f} | {jt:.3f} | {lo + jt:.3f} |", flush=True)


if __name__ == "__main__":
    main()
