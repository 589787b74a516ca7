"""On the GPU: the integer programs of the CPU tests (tests/integer_cases.py) through the
real kernels, against Python's own integers; and int64 torch index tensors in and out,
against torch's own integer ops where torch defines the answer (a nonzero divisor)."""
import numpy as np
import pytest

import plait
from integer_cases import (SHAPES, bool_ops, bool_ops_inputs, bool_ops_want, by_param,
                           by_param_want, check, index_math, index_math_want, int_ops,
                           int_ops_inputs, int_ops_want)
from int_reference import draw

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("M, N", SHAPES + [(1000, 4099)])
@pytest.mark.parametrize("da, db, ds", [("int32", "int32", "int32"),
                                        ("int64", "int64", "int64"),
                                        ("int32", "int64", "int32")])
def test_integer_ops(M, N, da, db, ds):
    inputs = int_ops_inputs(np.random.default_rng(), M, N, da, db, ds)
    check(plait.run(int_ops, *inputs.values(), device="gpu"), int_ops_want(**inputs))


@pytest.mark.parametrize("M, N", SHAPES)
def test_bool_ops(M, N):
    inputs = bool_ops_inputs(np.random.default_rng(), M, N)
    check(plait.run(bool_ops, *inputs.values(), device="gpu"), bool_ops_want(**inputs))


@pytest.mark.parametrize("M, N", SHAPES)
@pytest.mark.parametrize("k", [3, -2])
def test_integer_math_on_indices_and_literals(M, N, k):
    x = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    check(plait.run(index_math, x, k=k, device="gpu"), index_math_want(x, k))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("k", [3, -4, 0, 40])
def test_an_int_argument_meets_int32_and_int64(dtype, k):
    a = draw(np.random.default_rng(), dtype, (7, 33))
    check(plait.run(by_param, a, k=k, device="gpu"), by_param_want(a, k))


@pytest.mark.parametrize("M, N", [(5, 37), (129, 1000)])
def test_torch_index_tensors(M, N):
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(M * N)
    a = torch.randint(-2**40, 2**40, (M, N), dtype=torch.int64, device="cuda", generator=gen)
    b = torch.randint(-9, 10, (N, M), dtype=torch.int64, device="cuda", generator=gen)
    b[b == 0] = 3                           # torch's answer for a zero divisor is undefined
    a[a == 0] = 1                           # (mod_nm divides by a)
    s = torch.randint(0, 64, (N,), dtype=torch.int64, device="cuda", generator=gen)
    got = plait.run(int_ops, a, b, s, device="gpu")
    bt = b.T
    want = {"fdiv": torch.div(a, bt, rounding_mode="floor"), "mod": torch.remainder(a, bt),
            "shl": a << s, "shr": a >> s, "band": a & bt, "bor": a | bt, "bxor": a ^ bt,
            "bnot": ~a, "mod_nm": torch.remainder(bt, a).T}
    for name, w in want.items():
        assert got[name].dtype == torch.int64 and got[name].is_cuda, name
        assert torch.equal(got[name], w), name
