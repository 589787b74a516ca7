"""Integer ops through the kernels: the CPU executor of the lowered program (and, through
conftest, every program compiled for sm_80 and sm_90a and assembled by ptxas) against
Python's own integers (`int_reference`), at shapes that are not multiples of any tile,
with operands stored in other orders, int32, int64 and bool inputs, zero divisors and
shift counts out of range. The algorithms and inputs are shared with the GPU twin."""
import numpy as np
import pytest

import plait
from integer_cases import (SHAPES, bool_ops, bool_ops_inputs, bool_ops_want, by_param,
                           by_param_want, check, index_math, index_math_want, int_ops,
                           int_ops_inputs, int_ops_want)
from int_reference import draw
from plait.schedule import Schedule


@pytest.mark.parametrize("M, N", SHAPES)
@pytest.mark.parametrize("da, db, ds", [("int32", "int32", "int32"),
                                        ("int64", "int64", "int64"),
                                        ("int32", "int64", "int32")])
def test_integer_ops(M, N, da, db, ds):
    rng = np.random.default_rng()
    inputs = int_ops_inputs(rng, M, N, da, db, ds)
    got = plait.run(int_ops, *inputs.values(), device="cpu")
    check(got, int_ops_want(**inputs))
    check(plait.dsl.evaluate(int_ops.graph({k: v.dtype for k, v in inputs.items()}), inputs),
           int_ops_want(**inputs))


ODD_TILES = Schedule.from_dict({"algorithm": "int_ops", "grid": {"M": 2},
                                "block": {"N": {"threads": 32, "vector": 2}}})


@pytest.mark.parametrize("M, N", [(5, 37), (3, 130)])
def test_integer_ops_under_a_schedule_of_odd_tiles(M, N):
    rng = np.random.default_rng()
    inputs = int_ops_inputs(rng, M, N, "int64", "int32", "int32")
    got = plait.run(int_ops, *inputs.values(), schedule=ODD_TILES, device="cpu")
    check(got, int_ops_want(**inputs))


@pytest.mark.parametrize("M, N", SHAPES)
def test_bool_ops(M, N):
    inputs = bool_ops_inputs(np.random.default_rng(), M, N)
    got = plait.run(bool_ops, *inputs.values(), device="cpu")
    check(got, bool_ops_want(**inputs))


@pytest.mark.parametrize("M, N", SHAPES)
@pytest.mark.parametrize("k", [3, -2])
def test_integer_math_on_indices_and_literals(M, N, k):
    x = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    got = plait.run(index_math, x, k=k, device="cpu")
    check(got, index_math_want(x, k))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("k", [3, -4, 0, 40])
def test_an_int_argument_meets_int32_and_int64(dtype, k):
    a = draw(np.random.default_rng(), dtype, (7, 33))
    check(plait.run(by_param, a, k=k, device="cpu"), by_param_want(a, k))
