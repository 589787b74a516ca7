"""Run every example and its derived gradient once on the GPU at odd shapes, for
compute-sanitizer (not a pytest module: the sanitizer wraps this whole process).

    compute-sanitizer --tool memcheck --error-exitcode 1 python tests/gpu/sanitize_examples.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python tests/gpu/sanitize_examples.py

Each result is also checked against the float64 reference, so a kernel the sanitizer
passes but that computes garbage still fails. Exits 1 on any failure.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import torch

import plait
import plait.autodiff
from plait.dsl import evaluate
from plait.runtime.loading import load_algorithm

ROOT = pathlib.Path(__file__).resolve().parents[2]
ODD = {"M": 67, "N": 328, "K": 136, "B": 3}      # not tile multiples; 16-byte bf16 rows
UNALIGNED = {"M": 37, "N": 301, "K": 129, "B": 2}   # rows off the TMA's 16 bytes: threads copy


def _inputs(algo, sizes, rng):
    out = {}
    for p in algo.tensor_params:
        dtype = p.dtype.numpy if p.dtype is not None else np.float32
        arr = rng.standard_normal([sizes[a] for a in p.axes]).astype(np.float32)
        out[p.name] = arr.astype(dtype) if p.dtype is not None else arr
    return out


def _to_torch(arr, dtype):
    t = torch.from_numpy(np.asarray(arr, np.float32)).cuda()
    return t.to(dtype)


def _check(name, algo, graph_inputs, sizes, dtype, rng) -> list[str]:
    failures = []
    graph = algo.graph({p.name: p.dtype or dtype for p in algo.tensor_params})
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[str(dtype)]
    args = {}
    for p in algo.tensor_params:
        if p.dtype is not None and p.dtype.name.startswith("FP8"):
            args[p.name] = _to_torch(graph_inputs[p.name].astype(np.float32), torch.float32) \
                .to(torch.float8_e4m3fn)
        else:
            args[p.name] = _to_torch(graph_inputs[p.name], torch_dtype)
    out = plait.run(algo, **args)
    torch.cuda.synchronize()
    ref_in = {k: v.float().cpu().numpy().astype(np.float64) for k, v in args.items()}
    ref = evaluate(graph, ref_in)
    got = out if isinstance(out, dict) else {"out": out}
    for key, r in ref.items():
        g = got[key].float().cpu().numpy().astype(np.float64)
        err = np.abs(g - r).max() / max(np.abs(r).max(), 1e-30)
        if not np.isfinite(err) or err > 5e-2:
            failures.append(f"{name} {dtype} {sizes}: {key} rel err {err}")
    float_params = [p for p in algo.tensor_params if p.dtype is None]
    if float_params and dtype.name in ("BF16", "FP32"):
        bwd = plait.autodiff.grad(algo, wrt=[p.name for p in float_params])
        douts = {f"d{k}": torch.randn_like(v.float()).to(v.dtype) for k, v in got.items()}
        grads = plait.run(bwd, **args, **douts)
        torch.cuda.synchronize()
        for k, v in (grads if isinstance(grads, dict) else {"dx": grads}).items():
            if not torch.isfinite(v.float()).all():
                failures.append(f"{name}.bwd {dtype} {sizes}: {k} not finite")
    return failures


def main() -> int:
    rng = np.random.default_rng(0)
    failures = []
    from plait.dsl import DType
    for path in sorted((ROOT / "examples").glob("*.py")):
        algo = load_algorithm(str(path))
        for sizes in (ODD, UNALIGNED):
            for dtype in (DType.BF16, DType.FP32):
                inputs = _inputs(algo, sizes, rng)
                try:
                    failures += _check(path.stem, algo, inputs, sizes, dtype, rng)
                except Exception as e:   # a launch failure is what the sanitizer reports
                    failures.append(f"{path.stem} {dtype} {sizes}: {type(e).__name__}: {e}")
                print(f"ran {path.stem} {dtype} {sizes}", flush=True)
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
