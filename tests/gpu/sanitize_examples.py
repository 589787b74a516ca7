"""Run every algorithm of every example, and its derived gradient, once on the GPU at odd
shapes, for compute-sanitizer (not a pytest module: the sanitizer wraps this whole process).

    compute-sanitizer --tool memcheck --error-exitcode 1 python tests/gpu/sanitize_examples.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python tests/gpu/sanitize_examples.py
    python tests/gpu/sanitize_examples.py --list          # what it would run
    python tests/gpu/sanitize_examples.py --only attention,rotary_llama
    python tests/gpu/sanitize_examples.py --only grouped_query_attention --size G=3 --size R=5

Algorithms are found in examples/*.py (every one a file defines), extents come from the
CLI's table of odd sizes by axis name, and inputs from the CLI's generator (bool and int
tensors included), so an example added later is covered without editing this file. Each
result is also checked against the float64 reference, so a kernel the sanitizer passes
but that computes garbage still fails. Exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import traceback

import numpy as np

import plait
import plait.autodiff
from plait.dsl import DType, PlaitError, evaluate
from plait.runtime.loading import _algorithms, _import_file, default_sizes, make_inputs
from plait.runtime.tolerance import max_rel_err, tolerance

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Two odd size sets: the CLI's small table, and one whose bf16 rows are off 16 bytes (the
# TMA cannot address them: threads copy instead).
# An op the autodiff documents as having no gradient rule (the generic scan): its
# algorithm's forward is still sanitized, its gradient refused by name, not a failure.
NO_GRADIENT_RULE = "it has no gradient rule"
UNALIGNED = {"M": 37, "N": 301, "K": 129, "B": 1, "H": 2, "S": 45, "T": 53}


def every_example() -> list[tuple[str, object]]:
    found = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        module = _import_file(str(path))
        found += [(f"{path.stem}:{name}", algo) for name, algo in _algorithms(module).items()
                  if getattr(algo.fn, "__module__", None) == module.__name__]
    return found


def _size_sets(algo, override=None) -> list[dict[str, int]]:
    """The two size sets; `override` (axis -> extent) replaces an axis's extent in both
    (racecheck instruments every shared-memory access: 37 x 37 query heads take minutes)."""
    small = default_sizes(algo.axis_order, small=True)
    sets = [small, {**small, **{a: n for a, n in UNALIGNED.items() if a in small}}]
    return [{**s, **{a: n for a, n in (override or {}).items() if a in s}} for s in sets]


def _axis_extent(text: str) -> tuple[str, int]:
    axis, _, n = text.partition("=")
    if not axis or not n.isdigit() or int(n) < 1:
        raise argparse.ArgumentTypeError(f"--size takes AXIS=N with N >= 1, not {text!r}")
    return axis, int(n)


def _compare(label, got, ref, used) -> list[str]:
    tol = tolerance(used)
    refs = {key: np.asarray(r, np.float64) for key, r in ref.items()}
    scale = max((_top(r) for r in refs.values()), default=0.0)
    failures = []
    for key, r in refs.items():
        g = np.asarray(got[key]).astype(np.float64)
        # A row the reference cannot define (every key masked: NaN) is not compared;
        # everywhere else NaN or inf in the result is a failure (max_rel_err gives inf).
        keep = ~np.isnan(r)
        err = max_rel_err(g[keep], r[keep]) if keep.any() else 0.0
        if np.isfinite(err) and _top(r) < tol * scale:
            # Zero in exact arithmetic (a query that sees one key: its dq is p (dp - dp) k),
            # its reference norm float64's rounding: held, in absolute terms, to the scale
            # of what the same call computed.
            finite = keep & np.isfinite(r)
            err = np.abs(g[finite] - r[finite]).max(initial=0.0) / scale
        if not err <= tol:
            failures.append(f"{label}: {key} max_rel_err {err:.3g} > {tol:g}")
    return failures


def _top(r: np.ndarray) -> float:
    return float(np.abs(r[np.isfinite(r)]).max(initial=0.0))


def _as_dict(names, result) -> dict:
    if isinstance(result, dict):
        return result
    if isinstance(result, tuple):
        return dict(zip(names, result))
    return {names[0]: result}


def check(label, algo, sizes, float_dtype, seed, device="gpu") -> list[str]:
    dtypes = {p.name: p.dtype or float_dtype for p in algo.tensor_params}
    graph = algo.graph(dtypes)
    inputs = make_inputs(algo, dtypes, sizes, seed)
    out = _as_dict(list(graph.outputs), plait.run(algo, device=device, **inputs))
    used = list(dtypes.values())
    failures = _compare(f"{label} fwd", out, evaluate(graph, inputs), used)
    wrt = [p.name for p in algo.tensor_params
           if p.dtype is None and dtypes[p.name].is_float]
    if not wrt:
        return failures
    try:
        bwd = plait.autodiff.grad(algo, wrt=wrt)
    except PlaitError as e:
        if NO_GRADIENT_RULE not in str(e):
            raise
        print(f"no gradient for {label}: {e}")      # documented (the generic scan's)
        return failures
    rng = np.random.default_rng(seed + 1)
    douts = {f"d{k}": rng.standard_normal(np.shape(v)).astype(float_dtype.numpy)
             for k, v in out.items()}
    bwd_inputs = {**inputs, **douts}
    bwd_graph = bwd.graph({p.name: dtypes.get(p.name, float_dtype) for p in bwd.tensor_params})
    grads = _as_dict(list(bwd_graph.outputs), plait.run(bwd, device=device, **bwd_inputs))
    return failures + _compare(f"{label} bwd", grads, evaluate(bwd_graph, bwd_inputs), used)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated algorithm names")
    parser.add_argument("--size", type=_axis_extent, action="append", default=[],
                        help="AXIS=N: this extent for AXIS in every size set (repeatable)")
    parser.add_argument("--list", action="store_true", help="print what would run and stop")
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"),
                        help="cpu: the CPU executor, to try this script without a GPU")
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    runs = [(name, algo, sizes, dtype)
            for name, algo in every_example() if not only or name.split(":")[1] in only
            for sizes in _size_sets(algo, dict(args.size)) for dtype in (DType.BF16, DType.FP32)]
    failures = []
    for i, (name, algo, sizes, dtype) in enumerate(runs):
        label = f"{name} {dtype.name.lower()} " + ",".join(f"{a}={n}" for a, n in sizes.items())
        if args.list:
            print(label)
            continue
        try:
            failures += check(label, algo, sizes, dtype, seed=i, device=args.device)
        except Exception as e:   # a launch failure is also what the sanitizer reports
            failures.append(f"{label}: {type(e).__name__}: {e}")
            traceback.print_exc()
        print(f"ran {label}", flush=True)
    for f in failures:
        print("FAIL", f)
    print(f"sanitize_examples: {len(runs)} runs, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
