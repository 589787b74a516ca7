"""rand and dropout through the kernels: the CPU executor against the test's own Philox
(tests/random_cases.py, Python ints) and the float64 reference, bit for bit for rand and
the dropout mask, at shapes that are not multiples of any tile, with inputs stored in
the other order, under a schedule of odd tiles, and fused into one kernel with a
residual add and LayerNorm. Every program is also compiled for sm_80 and sm_90a and
assembled by ptxas (tests/conftest.py wraps emulate); the PTX is read here for the
32x32 -> 64-bit products Philox is made of."""
import re

import numpy as np
import pytest

import plait
from plait.dsl import Tensor, algorithm, dropout, evaluate, rand
from plait.lowering import pipeline
from plait.schedule import Schedule
from random_cases import (SHAPES, assert_dropout_close, dropout_residual_layernorm,
                          dropout_residual_layernorm_want, dropout_want, drops, drops_want, uniform_want,
                          uniforms, uniforms_want)


@pytest.mark.parametrize("M, N", SHAPES)
@pytest.mark.parametrize("seed, offset", [(0, 0), (-123456789, 2 ** 31 - 40)])
def test_rand_is_bit_identical_to_the_reference(M, N, seed, offset):
    x = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    got = plait.run(uniforms, x, seed=seed, offset=offset, device="cpu")
    want = uniforms_want(M, N, seed, offset)
    ref = evaluate(uniforms.graph(), {"x": x, "seed": seed, "offset": offset})
    for name, w in want.items():
        assert got[name].dtype == np.float32 and got[name].shape == w.shape, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)


@algorithm
def tiled(x: Tensor["M", "N"], seed: int = 0):
    return {"u": rand(seed, over=("N", "M"), offset=1), "d": dropout(x, 0.25, seed)}


ODD_TILES = Schedule.from_dict({"algorithm": "tiled", "grid": {"M": 3},
                                "block": {"N": {"threads": 32, "vector": 4}}})


@pytest.mark.parametrize("M, N", [(37, 129), (5, 1030)])
def test_rand_and_dropout_under_a_schedule_of_odd_tiles(M, N):
    x = np.random.default_rng().standard_normal((M, N)).astype(np.float32) + 0.01
    got = plait.run(tiled, x, seed=7, schedule=ODD_TILES, device="cpu")
    np.testing.assert_array_equal(got["u"], uniform_want((N, M), 7, 1).T)
    assert_dropout_close(got["d"], dropout_want(x, 0.25, 7), x, 1e-6)


@pytest.mark.parametrize("M, N", SHAPES)
@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-6), ("bf16", 1e-2), ("fp16", 1e-3)])
def test_dropout_mask_is_exact_and_values_are_scaled(M, N, dtype, rtol):
    rng = np.random.default_rng()
    np_dtype = plait.dsl.dtype_of(dtype).numpy
    x = (rng.standard_normal((M, N)) + 0.01).astype(np_dtype)
    xt = (rng.standard_normal((N, M)) + 0.01).astype(np_dtype)
    x[x == 0], xt[xt == 0] = 1, 1                      # a dropped zero would hide
    got = plait.run(drops, x, xt, seed=5, device="cpu")
    want = drops_want(x.astype(np.float64), xt.astype(np.float64), 5)
    for name, w in want.items():
        assert got[name].dtype == np_dtype, name
        assert_dropout_close(got[name], w, xt.T if name == "dxt" else x, rtol)


@pytest.mark.parametrize("M, N", [(37, 129), (300, 7), (3, 1030)])
def test_dropout_residual_layernorm_is_one_kernel_and_right(M, N):
    rng = np.random.default_rng()
    x, r = (rng.standard_normal((M, N)).astype(np.float32) for _ in range(2))
    w, b = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    got = plait.run(dropout_residual_layernorm, x, r, w, b, seed=11, device="cpu")
    want = dropout_residual_layernorm_want(x, r, w, b, 11)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    low = pipeline.lower(dropout_residual_layernorm.graph(), None, {"M": M, "N": N}, True)
    assert len(low.kernel_graph.kernels) == 1


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_the_ptx_forms_philox_products_with_wide_or_high_multiplies(target):
    program = pipeline.compile_program(dropout_residual_layernorm.graph(), None,
                                       {"M": 300, "N": 7}, True, target)
    (kernel,) = program.kernels
    muls = set(re.findall(r"\bmul\.(?:hi|wide)\.u32\b", kernel.ptx))
    assert muls, "Philox's 32x32-bit products should be mul.hi.u32 or mul.wide.u32"


@algorithm
def big_counter(x: Tensor["M", "N"], seed: int = 0):
    """A counter past 2**31 (the linear index plus an offset wraps through the sign bit
    and past 2**32): the kernels' int32 arithmetic must wrap as the definition does."""
    return {"u": rand(seed, over=("N", "M"), offset=2 ** 32 - 1000)}


def test_the_counter_wraps_mod_two_to_the_32():
    x = np.random.default_rng().standard_normal((40, 77)).astype(np.float32)
    got = plait.run(big_counter, x, seed=3, device="cpu")["u"]
    np.testing.assert_array_equal(got, uniform_want((77, 40), 3, 2 ** 32 - 1000).T)
