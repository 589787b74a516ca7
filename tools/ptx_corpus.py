"""The PTX of a fixed corpus of programs, one digest per kernel: run it before and after a
refactor of the lowering and diff the two files, so that a change meant to keep every
kernel as it was (a move, a new representation of the same program) is checked byte by
byte on a machine without a GPU.

    python tools/ptx_corpus.py > before.txt   ...edit...   python tools/ptx_corpus.py > after.txt
    diff before.txt after.txt

The corpus: every example (and its gradient where one exists) and the contraction test
cases, at aligned and odd sizes, for sm_80 and sm_90a, with the shipped schedules and the
defaults, bases aligned and not.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in ("examples", "tests"):
    sys.path.insert(0, str(ROOT / folder))

from plait.autodiff import grad  # noqa: E402
from plait.dsl import DType  # noqa: E402
from plait.lowering.pipeline import compile_program  # noqa: E402
from plait.schedule.lookup import find_schedule  # noqa: E402

GEMM_SIZES = ({"M": 256, "N": 512, "K": 384}, {"M": 129, "N": 65, "K": 77},
              {"M": 300, "N": 132, "K": 208}, {"M": 2048, "N": 1024, "K": 8192},
              {"M": 16, "N": 4096, "K": 4096})

# (module, algorithm, sizes of its other axes, dtype of its tensors or None as declared)
PROGRAMS = [
    ("matmul", "matmul", {}, DType.BF16),
    ("matmul", "matmul", {}, DType.FP16),
    ("matmul_bias_gelu", "matmul_bias_gelu", {}, DType.BF16),
    ("matmul_fp8", "matmul_fp8", {}, None),
    ("bmm", "bmm", {"B": 3}, DType.BF16),
    ("contraction_cases", "mm_nt", {}, DType.BF16),
    ("contraction_cases", "mm_tn", {}, DType.BF16),
    ("contraction_cases", "mm_out_t", {}, DType.BF16),
    ("contraction_cases", "mm_residual", {}, DType.BF16),
    ("contraction_cases", "mm_silu_rows", {}, DType.BF16),
]
OTHERS = [   # non-contraction examples at one odd size
    ("layernorm", "layernorm", {"M": 37, "N": 3001}, DType.BF16),
    ("softmax", "softmax", {"M": 33, "N": 1531}, DType.BF16),
    ("swiglu", "swiglu", {"M": 19, "N": 4101}, DType.BF16),
    ("attention", "attention", {"B": 1, "H": 2, "S": 300, "T": 333, "D": 64}, DType.BF16),
    ("attention", "causal_attention", {"B": 1, "H": 2, "S": 300, "T": 333, "D": 64},
     DType.BF16),
]
# Rows longer than the registers hold, compiled again with reloaded rows switched on
# (lowering/ir/simt_reload.py), so the pulled-load path is in the corpus while it is off by
# default.
LONG_ROWS = [
    ("softmax", "softmax", {"M": 64, "N": 50257}, DType.BF16),
    ("embedding", "cross_entropy", {"N": 64, "V": 50257}, None),
]


def _graph(algo, dtype):
    return algo.graph({p.name: dtype for p in algo.params if p.is_tensor} if dtype else {})


def _programs():
    for module, name, extra, dtype in PROGRAMS:
        algo = getattr(importlib.import_module(module), name)
        for sizes in GEMM_SIZES:
            yield algo, dtype, {**sizes, **extra}
    for module, name, sizes, dtype in OTHERS:
        yield getattr(importlib.import_module(module), name), dtype, sizes


def _digests(algo, dtype, sizes):
    graph = _graph(algo, dtype)
    for target, arch in (("sm_80", "sm_80"), ("sm_90a", "sm_90")):
        for shipped in (False, True):
            schedule = find_schedule(algo.name, arch) if shipped else None
            if shipped and schedule is None:
                continue
            for aligned in (True, False):
                label = f"{algo.name} {dtype} {sizes} {target} " \
                        f"{'shipped' if shipped else 'default'} {'aligned' if aligned else 'any'}"
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        program = compile_program(graph, schedule, sizes, aligned, target)
                except Exception as error:          # the same refusal before and after
                    yield label, f"error {type(error).__name__}: {error}"
                    continue
                for k in program.kernels:
                    yield f"{label} {k.name}", hashlib.sha256(k.ptx.encode()).hexdigest()[:16]


def main() -> None:
    for algo, dtype, sizes in _programs():
        for label, digest in _digests(algo, dtype, sizes):
            print(label, digest, flush=True)
        if algo.name in ("matmul", "matmul_bias_gelu", "layernorm", "softmax"):
            try:
                backward = grad(algo)
            except Exception as error:
                print(f"grad {algo.name}: {type(error).__name__}: {error}")
                continue
            for label, digest in _digests(backward, dtype, sizes):
                print(label, digest, flush=True)
    os.environ["PLAIT_RELOAD_ROWS"] = "1"
    for module, name, sizes, dtype in LONG_ROWS:
        algo = getattr(importlib.import_module(module), name)
        for program in (algo, grad(algo)):
            for label, digest in _digests(program, dtype, sizes):
                print("reloaded", label, digest, flush=True)


if __name__ == "__main__":
    main()
