"""sort and topk on the CPU executor (the bitonic network of ir/sort_steps.py, run pass by
pass) against torch.sort(stable=True) on CPU, at row lengths 1 to 4096 that are not
multiples of threads x vector, with planted ties, NaN, +-inf and -0.0, fp32 / bf16 / fp16 /
int32, both directions, an outer axis, permuted outputs, fused producers and consumers,
a schedule of many threads and repeats, and refusals (4097 elements, a split axis).
Every program is also compiled for sm_80 and sm_90a and
assembled (tests/conftest.py wraps emulate; test_every_kernel_assembles asserts it)."""
import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")     # the reference (torch.sort, torch.topk)

import plait
from plait.autodiff import grad
from plait.dsl import PlaitError, Tensor, algorithm, exp, permute, sort, sum, topk
from plait.lowering import pipeline
from plait.runtime.ptxas import find_ptxas, resource_usage
from plait.schedule import load_schedule


def planted(rng, shape, dtype=np.float32):
    if np.dtype(dtype).kind == "i":
        x = rng.integers(-6, 7, shape).astype(dtype)
        x.reshape(-1)[rng.integers(0, x.size, max(1, x.size // 30))] = np.iinfo(np.int32).min
        x.reshape(-1)[rng.integers(0, x.size, max(1, x.size // 30))] = np.iinfo(np.int32).max
        return x
    x = (rng.integers(-4, 5, shape) * 0.5).astype(np.float32)
    x += (rng.random(shape) < 0.5) * rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    for value in (np.nan, np.inf, -np.inf, -0.0, np.nan):
        flat[rng.integers(0, flat.size, max(1, flat.size // 25))] = value
    return x.astype(dtype)


def torch_sort(x, dim: int, descending: bool):
    t = torch.from_numpy(np.asarray(x, np.float32) if x.dtype.kind == "f" or
                         x.dtype == ml_dtypes.bfloat16 else x)
    out = torch.sort(t, dim=dim, descending=descending, stable=True)
    return out.values.numpy(), out.indices.numpy().astype(np.int32)


def check(got_values, got_at, x, dim, descending):
    values, at = torch_sort(x, dim, descending)
    assert got_at.dtype == np.int32
    np.testing.assert_array_equal(got_at, at)
    np.testing.assert_array_equal(np.asarray(got_values, np.float64), values)


def rows_of(dtype):
    @algorithm
    def rows(x: Tensor["M", "N", dtype]):
        up, up_at = sort(x, over="N", return_indices=True)
        down, down_at = sort(x, over="N", descending=True, return_indices=True)
        return {"up": up, "up_at": up_at, "down": down, "down_at": down_at}
    return rows


ROWS = {d: rows_of(d) for d in ("fp32", "bf16", "fp16", "int32")}
NUMPY = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16,
         "int32": np.int32}


@pytest.mark.parametrize("N", [1, 7, 37, 129, 1000, 4096])
def test_fp32_rows_both_ways(N):
    x = planted(np.random.default_rng(), (3, N))
    got = plait.run(ROWS["fp32"], x, device="cpu")
    check(got["up"], got["up_at"], x, 1, False)
    check(got["down"], got["down_at"], x, 1, True)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "int32"])
@pytest.mark.parametrize("N", [37, 1000])
def test_narrow_and_integer_rows(dtype, N):
    x = planted(np.random.default_rng(), (5, N), NUMPY[dtype])
    got = plait.run(ROWS[dtype], x, device="cpu")
    assert got["up"].dtype == x.dtype
    check(got["up"], got["up_at"], x, 1, False)
    check(got["down"], got["down_at"], x, 1, True)


@algorithm
def outer(x: Tensor["N", "M"]):
    values, at = sort(x * 2.0 + 1.0, over="N", descending=True, return_indices=True)
    return {"values": permute(exp(values), "M", "N"), "at": at}


@pytest.mark.parametrize("N,M", [(37, 5), (300, 3), (1, 4)])
def test_an_outer_axis_fused_and_permuted(N, M):
    x = planted(np.random.default_rng(), (N, M))
    got = plait.run(outer, x, device="cpu")
    values, at = torch_sort(x * 2.0 + 1.0, 0, True)
    np.testing.assert_array_equal(got["at"], at)
    np.testing.assert_allclose(got["values"], np.exp(values.astype(np.float64)).T,
                               rtol=2e-6, atol=0)


def topk_of(k):
    @algorithm
    def top(x: Tensor["M", "N"]):
        values, at = topk(x, k, over="N", into="K")
        low, low_at = topk(x, k, over="N", into="J", largest=False)
        return {"values": values, "at": at, "low": low, "low_at": low_at}
    return top


@pytest.mark.parametrize("k", [1, 5, 64, 129])
@pytest.mark.parametrize("N", [129, 1000])
def test_topk(k, N):
    x = planted(np.random.default_rng(), (4, N))
    got = plait.run(topk_of(k), x, device="cpu")
    values, at = torch_sort(x, 1, True)
    np.testing.assert_array_equal(got["at"], at[:, :k])
    np.testing.assert_array_equal(got["values"], values[:, :k])
    values, at = torch_sort(x, 1, False)
    np.testing.assert_array_equal(got["low_at"], at[:, :k])
    np.testing.assert_array_equal(got["low"], values[:, :k])


def test_topk_agrees_with_torch_topk_on_distinct_values():
    x = np.random.default_rng().standard_normal((6, 1000)).astype(np.float32)
    got = plait.run(topk_of(64), x, device="cpu")
    want = torch.topk(torch.from_numpy(x), 64, dim=1)
    np.testing.assert_array_equal(got["values"], want.values.numpy())
    np.testing.assert_array_equal(got["at"], want.indices.numpy())


def test_many_threads_and_repeats(tmp_path):
    path = tmp_path / "rows.yaml"
    path.write_text("algorithm: rows\ngrid: {M: 1}\nblock: {N: {threads: 128, vector: 2}}\n")
    x = planted(np.random.default_rng(), (3, 1001))
    got = plait.run(ROWS["fp32"], x, schedule=load_schedule(path), device="cpu")
    check(got["down"], got["down_at"], x, 1, True)


@algorithm
def weighted(x: Tensor["M", "N"], w: Tensor["M", "K"]):
    values, _ = topk(x, 5, over="N", into="K")
    return sum(values * w, over="K")


def test_the_gradient_on_the_cpu_executor():
    rng = np.random.default_rng()
    x = rng.standard_normal((4, 129)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    dout = rng.standard_normal(4).astype(np.float32)
    dx = plait.run(grad(weighted, wrt=["x"]), x, w, dout=dout, device="cpu")["dx"]
    want = np.zeros((4, 129))
    np.put_along_axis(want, np.argsort(-x, axis=1, kind="stable")[:, :5],
                      w.astype(np.float64) * dout[:, None], 1)
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=0)


def test_4097_elements_are_refused_by_name():
    x = np.zeros((2, 4097), np.float32) + 1.0
    with pytest.raises(PlaitError, match="at most 4096 elements"):
        plait.run(ROWS["fp32"], x, device="cpu")


def test_a_split_axis_is_refused(tmp_path):
    path = tmp_path / "rows.yaml"
    path.write_text("algorithm: rows\ngrid: {M: 1, N: 256}\nblock: {N: {threads: 64, vector: 4}}\n")
    with pytest.raises(PlaitError, match="sort over N is split across blocks"):
        pipeline.lower(ROWS["fp32"].graph(), load_schedule(path), {"M": 3, "N": 1000}, True)


@pytest.mark.parametrize("N", [1, 37, 4096])
def test_every_kernel_assembles(N):
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    for graph, sizes in ((ROWS["fp32"].graph(), {"M": 3, "N": N}),
                         (ROWS["int32"].graph(), {"M": 3, "N": N}),
                         (outer.graph(), {"M": 3, "N": N})):
        for target in ("sm_80", "sm_90a"):
            program = pipeline.compile_program(graph, None, sizes, True, target)
            for kernel in program.kernels:
                usage = resource_usage(kernel.ptx, target)[kernel.entry]
                assert usage.spill_stores == 0
