"""topk on the CPU executor at row lengths from 1 to 40000: one block per row up to 4096
elements, two kernels past that (lowering/graph/topk_split.py), against an independent
float64 numpy reference (a stable lexsort: NaN largest, ties by the lower index) and the
algorithm's reference evaluator; fp32 / bf16 / fp16 / int32 with planted ties, NaN,
+-inf, -0.0 and the int32 extremes (which equal the pads of a split row), largest and
smallest, k from 1 to 100, a permuted storage order, explicit schedules, consumers of
the results, the gradient, and refusals. Every program the CPU runs is also compiled for
sm_80 and sm_90a and assembled with ptxas (tests/conftest.py wraps emulate);
test_every_kernel_assembles also checks that no kernel spills."""
import ml_dtypes
import numpy as np
import pytest

import plait
from plait.autodiff import grad
from plait.dsl import PlaitError, Tensor, algorithm, exp, permute, sum, topk
from plait.dsl.reference import evaluate
from plait.lowering import pipeline
from plait.lowering.artifact import Program
from plait.runtime.ptxas import find_ptxas, resource_usage
from plait.schedule import load_schedule
from topk_cases import top_of

NUMPY = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16,
         "int32": np.int32}


def planted(rng, shape, dtype=np.float32):
    if np.dtype(dtype).kind == "i":
        x = rng.integers(-6, 7, shape).astype(np.int32)
        flat = x.reshape(-1)
        for value in (np.iinfo(np.int32).min, np.iinfo(np.int32).max):
            flat[rng.integers(0, flat.size, max(1, flat.size // 30))] = value
        return x
    x = (rng.integers(-4, 5, shape) * 0.5).astype(np.float32)
    x += (rng.random(shape) < 0.3) * rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    for value in (np.nan, np.inf, -np.inf, -0.0):
        flat[rng.integers(0, flat.size, max(1, flat.size // 40))] = value
    return x.astype(dtype)


def want(x, k: int, axis: int, largest: bool):
    """(values as float64, int64 indices) of the k best along `axis`: a stable lexsort
    by (NaN, value, index), NaN the largest."""
    rows = np.moveaxis(np.asarray(x).astype(np.float64), axis, -1)
    flat = rows.reshape(-1, rows.shape[-1])
    position = np.arange(flat.shape[1])
    orders = []
    for row in flat:
        nan = np.isnan(row)
        value = np.where(nan, 0.0, row)
        keys = (position, -value, ~nan) if largest else (position, value, nan)
        orders.append(np.lexsort(keys)[:k])
    order = np.array(orders).reshape(rows.shape[:-1] + (k,))
    values = np.take_along_axis(rows, order, -1)
    return np.moveaxis(values, -1, axis), np.moveaxis(order, -1, axis)


def check(got_values, got_at, x, k, axis, largest):
    values, at = want(x, k, axis, largest)
    assert got_at.dtype == np.int32
    np.testing.assert_array_equal(got_at, at)
    assert got_values.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(got_values, np.float64), values)


def run_and_check(x, k, dtype="fp32", **kwargs):
    algo = top_of(k, dtype)
    got = plait.run(algo, x, device="cpu", **kwargs)
    check(got["values"], got["at"], x, k, 1, True)
    check(got["low"], got["low_at"], x, k, 1, False)
    ref = evaluate(algo.graph(), {"x": x})       # the algorithm's reference agrees
    np.testing.assert_array_equal(ref["at"], got["at"])
    np.testing.assert_array_equal(ref["low_at"], got["low_at"])


@pytest.mark.parametrize("k", [1, 5, 64, 100])
@pytest.mark.parametrize("N", [1, 37, 300, 4097, 10000, 40000])
def test_fp32_rows(N, k):
    if k > N:
        pytest.skip("k past the row: test_k_past_the_row_is_refused")
    run_and_check(planted(np.random.default_rng(), (3 if N < 40000 else 2, N)), k)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "int32"])
@pytest.mark.parametrize("N", [300, 10000])
def test_narrow_and_integer_rows(dtype, N):
    run_and_check(planted(np.random.default_rng(), (3, N), NUMPY[dtype]), 64, dtype)


def test_a_row_of_one_value_keeps_the_lowest_indices():
    x = np.full((2, 10000), -np.inf, np.float32)       # every element ties with the pad
    run_and_check(x, 64)
    x = np.full((2, 10000), np.iinfo(np.int32).min, np.int32)
    run_and_check(x, 5, "int32")


def test_k_past_the_row_is_refused():
    x = planted(np.random.default_rng(), (2, 37))
    with pytest.raises(PlaitError, match="past the end of axis N"):
        plait.run(top_of(100), x, device="cpu")


def test_k_past_half_a_block_on_a_long_row_is_refused():
    with pytest.raises(PlaitError, match="supported up to 2048"):
        pipeline.lower(top_of(3000).graph(), None, {"M": 2, "N": 10000}, True)


@algorithm
def outer(x: Tensor["N", "M"]):
    values, at = topk(x * 2.0 + 1.0, 7, over="N", into="K")
    return {"values": permute(exp(values), "M", "K"), "at": at}


@pytest.mark.parametrize("N", [37, 300, 10000])
def test_an_outer_axis_fused_producer_and_permuted_consumer(N):
    x = planted(np.random.default_rng(), (N, 4))
    got = plait.run(outer, x, device="cpu")
    values, at = want(x.astype(np.float64) * 2.0 + 1.0, 7, 0, True)
    np.testing.assert_array_equal(got["at"], at)
    np.testing.assert_allclose(got["values"], np.exp(values).T, rtol=2e-6, atol=0)


def test_one_kernel_per_row_and_two_past_a_block():
    graph = top_of(64).graph()
    one = pipeline.lower(graph, None, {"M": 8, "N": 4096}, True).kernel_graph
    assert len(one.kernels) == 1 and not [b for b in one.buffers if b.role == "temp"]
    low = pipeline.lower(graph, None, {"M": 8, "N": 128256}, True)
    kernels = low.kernel_graph.kernels
    assert len(kernels) == 4            # per direction: the chunks' kernel, the rows' one
    temps = [b for b in low.kernel_graph.buffers if b.role == "temp"]
    assert sorted(b.shape(low.sizes) for b in temps) == [(8, 32, 64)] * 4
    program = pipeline.compile_program(graph, None, {"M": 8, "N": 128256}, True, "sm_90a")
    given = {"M": 8, "N": 128256, "K": 64, "J": 64}
    assert program.complete_sizes(given) == low.sizes        # the new axes at run time
    assert Program.from_json(program.to_json()).complete_sizes(given) == low.sizes
    deep = pipeline.lower(top_of(64).graph(), None, {"M": 2, "N": 300000}, True)
    assert len(deep.kernel_graph.kernels) == 6      # 4736 candidates: split again


def test_a_row_split_twice():
    run_and_check(planted(np.random.default_rng(), (1, 300000)), 64)


def test_explicit_schedules(tmp_path):
    path = tmp_path / "top.yaml"
    path.write_text("algorithm: top\ngrid: {M: 1}\nblock: {N: {threads: 128, vector: 2}}\n")
    run_and_check(planted(np.random.default_rng(), (3, 1001)), 5,
                  schedule=load_schedule(path))
    # a long row's kernels: each direction's chunks (view0, view2: the candidates'
    # temporaries) and rows (named by their outputs), over the axes the split made
    path.write_text("algorithm: top\nkernels:\n"
                    "  view0: {block: {N_l0: {threads: 1024, vector: 2}}}\n"
                    "  view2: {block: {N_l1: {threads: 512}}}\n"
                    "  values: {block: {N_q0: {threads: 64, vector: 1}}}\n"
                    "  low: {block: {N_q1: {threads: 32}}}\n")
    run_and_check(planted(np.random.default_rng(), (2, 10000)), 5,
                  schedule=load_schedule(path))


def test_a_chunk_split_across_blocks_is_refused(tmp_path):
    path = tmp_path / "top.yaml"
    path.write_text("algorithm: top\nkernels:\n"
                    "  view0: {grid: {M: 1, N_l0: 1024}, block: {N_l0: {threads: 256}}}\n")
    with pytest.raises(PlaitError, match="topk over N_l0 is split across blocks"):
        pipeline.lower(top_of(5).graph(), load_schedule(path), {"M": 2, "N": 10000}, True)


@algorithm
def weighted(x: Tensor["M", "N"], w: Tensor["M", "K"]):
    values, _ = topk(x, 5, over="N", into="K")
    return sum(values * w, over="K")


@pytest.mark.parametrize("N", [129, 10000])
def test_the_gradient(N):
    rng = np.random.default_rng()
    x = rng.standard_normal((3, N)).astype(np.float32)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    dout = rng.standard_normal(3).astype(np.float32)
    dx = plait.run(grad(weighted, wrt=["x"]), x, w, dout=dout, device="cpu")["dx"]
    expect = np.zeros((3, N))
    np.put_along_axis(expect, want(x, 5, 1, True)[1], w.astype(np.float64) * dout[:, None], 1)
    np.testing.assert_allclose(dx, expect, rtol=1e-6, atol=0)


def test_the_ir_interpreter_runs_a_split_row(monkeypatch):
    monkeypatch.setenv("PLAIT_IR_EXECUTOR", "1")
    run_and_check(planted(np.random.default_rng(), (2, 10000)), 64)


@pytest.mark.parametrize("dtype,N", [("fp32", 4096), ("bf16", 128256), ("int32", 40000),
                                     ("fp16", 300)])
def test_every_kernel_assembles(dtype, N):
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    for graph in (top_of(64, dtype).graph(), outer.graph()):
        for target in ("sm_80", "sm_90a"):
            program = pipeline.compile_program(graph, None, {"M": 3, "N": N}, True, target)
            for kernel in program.kernels:
                usage = resource_usage(kernel.ptx, target)[kernel.entry]
                assert usage.spill_stores == 0
