"""A tensor-core contraction as a loop tile program (`tileir/tile_contraction.py`): its
form (a loop over K carrying the accumulator, a `dot`, the epilogue after the loop), the
loop executor's result against numpy float64 on odd shapes, split-K ranges, scalar
factors moved past the loop, and the same programs through ptxas for sm_80 and sm_90a."""
import numpy as np
import pytest

import contraction_cases as cc
from plait.dsl import DType
from plait.lowering.gemm.plan import GemmProgram
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.runtime.ptxas import assemble, find_ptxas
from plait.schedule import Schedule

from matmul import matmul

ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")


def bf16_inputs(shapes, rng):
    return {n: rng.standard_normal(s).astype(DType.BF16.numpy) for n, s in shapes.items()}


def gemm_of(algo, sizes, schedule=None, target="sm_90a", dtype="bf16"):
    graph = algo.graph({p.name: dtype for p in algo.tensor_params})
    (g,) = [t for t in lower(graph, schedule, sizes, True, target).threads
            if isinstance(t, GemmProgram)][:1]
    return graph, g


def test_the_sum_is_a_loop_over_k_with_a_dot():
    _, g = gemm_of(matmul, {"M": 257, "N": 136, "K": 208})
    kinds = [op.op for op in g.program.ops]
    assert "sum" not in kinds and kinds.count("loop") == 1 and kinds.count("dot") == 1
    loop = next(op for op in g.program.ops if op.op == "loop")
    assert loop.attr("axis") == "K" and loop.attr("step") == g.tile_k
    assert loop.attr("split") is None
    dot = next(op for op in g.program.ops if op.op == "dot")
    streamed = [g.program.ops[a] for a in dot.args[:2]]
    assert all(op.op == "load" and op.attr("stream") == "K" for op in streamed)
    assert [g.program.ops[a].op for a in dot.args[2:]] == ["carried"]
    # The store reads the loop's result, after the loop.
    store = next(op for op in g.program.ops if op.op == "store")
    assert kinds.index("result") > kinds.index("yield") and store.id > kinds.index("result")


def test_scalar_factors_run_after_the_loop():
    """`sum(a*b) * alpha`: alpha multiplies the loop's result, once, not every product."""
    _, g = gemm_of(cc.mm_residual, {"M": 130, "N": 72, "K": 88})
    ops = g.program.ops
    result = next(op for op in ops if op.op == "result")
    users = [op for op in ops if result.id in op.args]
    assert [op.op for op in users] == ["mul"]
    (factor,) = [ops[a] for a in users[0].args if a != result.id]
    assert factor.op == "param" and factor.attr("name") == "alpha"
    loop = next(op for op in ops if op.op == "loop")
    body = [op for op in ops if op.attr("loop") == loop.id and op.op != "result"]
    assert all(op.op != "param" for op in body)


@pytest.mark.parametrize("sizes", [{"M": 257, "N": 136, "K": 1000},
                                   {"M": 64, "N": 24, "K": 8},      # K shorter than a tile
                                   {"M": 1, "N": 8, "K": 200}])
def test_loop_executor_matches_float64(sizes):
    rng = np.random.default_rng(sum(sizes.values()))
    graph, g = gemm_of(cc.mm_residual, sizes)
    inputs = bf16_inputs({"a": (sizes["M"], sizes["K"]), "b": (sizes["K"], sizes["N"]),
                          "c": (sizes["M"], sizes["N"])}, rng)
    out = emulate(graph, None, sizes, inputs, {"alpha": 0.75}, "sm_90a")["out"]
    a, b, c = (inputs[n].astype(np.float64) for n in "abc")
    ref = a @ b * 0.75 + c
    assert out.shape == ref.shape and np.isfinite(out.astype(np.float64)).all()
    err = np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < 8e-3, err      # bf16 output rounding; the sums are fp32


@pytest.mark.parametrize("split", [2, 3, 5])
def test_split_loops_sum_their_own_range(split):
    """Each index of the split axis walks its own range of K; the finish kernel adds the
    partials. K = 1000 leaves the last range short and its last tile partial."""
    sizes = {"M": 130, "N": 72, "K": 1000}
    s = Schedule.from_dict({"algorithm": "matmul", "contraction": {"split_k": split}})
    graph, g = gemm_of(matmul, sizes, s)
    loop = next(op for op in g.program.ops if op.op == "loop")
    assert loop.attr("split") == (g.split, g.split_chunk)
    assert g.split_chunk % g.tile_k == 0 and g.split_chunk * split >= sizes["K"]
    rng = np.random.default_rng(split)
    inputs = bf16_inputs({"a": (130, 1000), "b": (1000, 72)}, rng)
    out = emulate(graph, s, sizes, inputs, {}, "sm_90a")["out"].astype(np.float64)
    ref = inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)
    assert np.abs(out - ref).max() / np.abs(ref).max() < 8e-3


@ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("case", ["residual", "split"])
def test_the_same_programs_assemble(target, case):
    """The programs the executor ran above, compiled and through ptxas on both targets."""
    if case == "residual":
        algo, sizes, s = cc.mm_residual, {"M": 257, "N": 136, "K": 1000}, None
    else:
        algo, sizes = matmul, {"M": 130, "N": 72, "K": 1000}
        s = Schedule.from_dict({"algorithm": "matmul", "contraction": {"split_k": 3}})
    graph = algo.graph({p.name: "bf16" for p in algo.tensor_params})
    program = compile_program(graph, s, sizes, True, target)
    assert program.kernels
    for kernel in program.kernels:
        assert len(assemble(kernel.ptx, target)) > 0
