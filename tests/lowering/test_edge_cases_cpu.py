"""Shapes and algorithms off the beaten path, through the kernels (CPU executor) and ptxas."""
import numpy as np
import pytest

import plait
import builtins

from plait.dsl import Tensor, algorithm, cast, max, mean, softmax, sum, where
from plait.lowering.pipeline import compile_program
from plait.runtime.ptxas import assemble, find_ptxas


@algorithm
def rowsum(x: Tensor["M", "N"]):
    return sum(x, over="N")


@algorithm
def total(x: Tensor["M", "N"]):
    return sum(x, over=("M", "N"))


@algorithm
def batched_softmax(x: Tensor["B", "M", "N"], w: Tensor["N"]):
    return softmax(x * w, over="N")


@algorithm
def mixed_outputs(x: Tensor["M", "N"]):
    return {"rows": max(x, over="N"), "cols": mean(x, over="M"), "y": x * 2.0}


@algorithm
def masked(x: Tensor["M", "N"], t: float = 0.5):
    return where(x > t, x, 0.0)


@algorithm
def scaled_int(i: Tensor["M", "int32"], x: Tensor["M"]):
    return x * i


@algorithm
def swapped(x: Tensor["N", "M"], y: Tensor["M", "N"]):
    return x + y


@algorithm
def layernorm_long(x: Tensor["M", "N"]):
    xc = x - mean(x, over="N")
    return xc / mean(xc * xc, over="N")


def _rng():
    return np.random.default_rng()


def _f32(*shape):
    return _rng().standard_normal(shape).astype(np.float32)


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


CASES = {
    "three columns": lambda: (rowsum, [x := _f32(5, 3)], [x.sum(1)]),
    "one element": lambda: (rowsum, [x := _f32(1, 1)], [x.sum(1)]),
    "sum to a scalar": lambda: (total, [x := _f32(1001, 37)], [np.array(x.sum())]),
    "batch axis": lambda: (batched_softmax, [x := _f32(3, 5, 37), w := _f32(37)],
                           [_softmax(x * w)]),
    "outputs over different axes": lambda: (mixed_outputs, [x := _f32(257, 37)],
                                            [x.max(1), x.mean(0), 2 * x]),
    "where with a scalar": lambda: (masked, [x := _f32(9, 33)], [np.where(x > 0.5, x, 0)]),
    "int times float": lambda: (scaled_int, [i := _rng().integers(-5, 5, 17).astype(np.int32),
                                             x := _f32(17)], [x * i]),
    "operand stored transposed": lambda: (swapped, [x := _f32(7, 5), y := _f32(5, 7)],
                                          [x + y.T]),
    "row longer than a block": lambda: (rowsum, [x := _f32(2, 300001)], [x.sum(1)]),
    "two-pass row longer than a block": lambda: (
        layernorm_long, [x := _f32(3, 200003)],
        [(x - x.mean(1, keepdims=True)) / ((x - x.mean(1, keepdims=True)) ** 2).mean(1, keepdims=True)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_case_matches_numpy(case):
    algo, args, want = CASES[case]()
    got = plait.run(algo, *args, device="cpu")
    got = list(got.values()) if isinstance(got, dict) else [got]
    # A sum of many signed terms can cancel to near 0 (a 1-in-300 draw of the scalar sum
    # did): its fp32 rounding scales with the terms' root sum of squares, not the result.
    spread = np.sqrt(np.sum(np.square(args[0], dtype=np.float64))) \
        if case == "sum to a scalar" else 0.0
    for g, w in zip(got, want):
        g = np.asarray(g, np.float64)
        assert g.shape == np.shape(w)
        scale = builtins.max(np.abs(w).max(), 1.0, spread)
        assert np.abs(g - w).max() <= 2e-5 * scale


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas")
@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_case_assembles(case):
    algo, args, _ = CASES[case]()
    dtypes = {p.name: str(a.dtype) for p, a in zip(algo.tensor_params, args)}
    sizes = {}
    for p, a in zip(algo.tensor_params, args):
        sizes.update(zip(p.axes, a.shape))
    program = compile_program(algo.graph(dtypes), None, sizes, False, "sm_90a")
    for kernel in program.kernels:
        assert assemble(kernel.ptx, "sm_90a")


def test_fp8_output_rounds_like_ml_dtypes():
    import ml_dtypes

    @algorithm
    def to_fp8(x: Tensor["M", "N"]):
        return cast(x * 100.0, "fp8_e4m3")
    x = _f32(9, 40)
    got = plait.run(to_fp8, x, device="cpu")
    want = np.clip(x * np.float32(100), -448, 448).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
