"""Algorithms the CPU executor ran but the LLVM backend crashed on (issue 10): tensor-core
contractions with fp32/narrow/integer epilogue inputs and integer reductions. Each runs
on the CPU executor against a float64 numpy reference on odd shapes, and compiles for
sm_80 and sm_90a through ptxas."""
import numpy as np
import pytest
from llvmlite import ir

from plait.dsl import DType, PlaitError, Tensor, algorithm, cast, evaluate, max, min, sum, where
from plait.dsl.dtypes import dtype_of
from plait.lowering.cpu import mathfns
from plait.lowering.nvptx import ops as L
from plait.lowering.gemm.plan import GemmProgram
from plait.lowering.nvptx.reduce import combine
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.runtime.ptxas import assemble, find_ptxas
from plait.schedule import Schedule

ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")
TARGETS = ("sm_80", "sm_90a")


@algorithm
def fp8_scaled(a: Tensor["M", "K"], b: Tensor["N", "K"], sa: Tensor["M", "fp32"],
               sb: Tensor["N", "fp32"], bias: Tensor["N", "fp32"]):
    return sum(a * b, over="K") * sa * sb + bias        # the standard fp8 scaling


@algorithm
def scaled_bias(a: Tensor["M", "K"], b: Tensor["N", "K"], s: Tensor["M"], bias: Tensor["N"]):
    return sum(a * b, over="K") * s + bias


@algorithm
def bias_to_bf16(a: Tensor["M", "K"], b: Tensor["N", "K"], bias: Tensor["N"]):
    return cast(sum(a * b, over="K") + bias, "bf16")


# M odd; K and N keep every row a multiple of 16 bytes (the TMA and cp.async need it).
GEMM_SIZES = {"M": 67, "N": 48, "K": 80}


# Relative to the largest |reference|: a few roundings to the output dtype.
TOLERANCE = {DType.FP32: 1e-5, DType.FP16: 2e-3, DType.BF16: 2e-2, DType.FP8_E4M3: 0.13,
             DType.FP8_E5M2: 0.25}


def _random(rng, shape, dtype: DType):
    if dtype.is_float:
        return rng.standard_normal(shape).astype(np.float32).astype(dtype.numpy)
    return rng.integers(-4, 5, shape).astype(dtype.numpy)


def _inputs(algo, dtypes: dict, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return {p.name: _random(rng, tuple(sizes[a] for a in p.axes), dtype_of(dtypes[p.name]))
            for p in algo.tensor_params}


def _reference(algo, inputs):
    """float64 numpy: out = (A @ B^T) * row/column factors + bias, then any cast."""
    f = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    acc = f["a"] @ f["b"].T
    if "sa" in f:
        return acc * f["sa"][:, None] * f["sb"][None, :] + f["bias"][None, :]
    if "s" in f:
        return acc * f["s"][:, None] + f["bias"][None, :]
    return acc + f["bias"][None, :]


def _rel_err(out, ref):
    out = np.asarray(out, np.float64)
    assert not np.isnan(out).any(), "an output element was never written"
    return np.abs(out - ref).max() / np.abs(ref).max()


def _check_gemm(algo, dtypes, out_dtype, tol):
    graph = algo.graph({k: v for k, v in dtypes.items()
                        if k in ("a", "b") or algo is not fp8_scaled})
    low = lower(graph, None, GEMM_SIZES, True, "sm_90a")
    assert isinstance(low.threads[0], GemmProgram), low.kernel_graph.text()
    assert f"output {out_dtype}" in low.kernel_graph.text()
    inputs = _inputs(algo, dtypes, GEMM_SIZES)
    out = emulate(graph, None, GEMM_SIZES, inputs, {}, "sm_90a")["out"]
    ref = _reference(algo, inputs)
    assert _rel_err(out, ref) < tol
    assert _rel_err(evaluate(graph, inputs)["out"], ref) < tol
    return graph


def _assemble_gemm(graph, operand: str):
    for target in TARGETS:
        program = compile_program(graph, None, GEMM_SIZES, True, target)
        if operand.startswith("fp8") and target == "sm_80":
            # sm_80 has no fp8 tensor cores: the generic kernels must still assemble.
            assert "mma" not in "".join(k.ptx for k in program.kernels)
        else:
            (kernel,) = program.kernels        # the tensor-core kernel, epilogue fused
            assert ("wgmma.mma_async" if target == "sm_90a" else "mma.sync") in kernel.ptx
        for kernel in program.kernels:
            assert len(assemble(kernel.ptx, target)) > 0


@pytest.mark.parametrize("operand", ["bf16", "fp8_e4m3"])
def test_fp8_style_row_and_column_scales_with_fp32_bias(operand):
    """fp32 scales and bias on bf16/fp8 operands: the output is fp32."""
    dtypes = {"a": operand, "b": operand, "sa": "fp32", "sb": "fp32", "bias": "fp32"}
    graph = _check_gemm(fp8_scaled, dtypes, "fp32", TOLERANCE[DType.FP32])
    if find_ptxas() is not None:
        _assemble_gemm(graph, operand)


EPILOGUE_DTYPES = ["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int32"]


@pytest.mark.parametrize("operand", ["bf16", "fp8_e4m3"])
@pytest.mark.parametrize("epi", EPILOGUE_DTYPES)
def test_epilogue_inputs_of_every_dtype(operand, epi):
    dtypes = {"a": operand, "b": operand, "s": epi, "bias": epi}
    out = scaled_bias.graph(dtypes).outputs["out"].dtype     # the promoted dtype
    g = _check_gemm(scaled_bias, dtypes, out.short, TOLERANCE[out])
    if find_ptxas() is not None:
        _assemble_gemm(g, operand)


@pytest.mark.parametrize("operand, bias", [("bf16", "fp32"), ("fp8_e4m3", "fp32"),
                                           ("fp8_e4m3", "bf16"), ("fp16", "int32")])
def test_output_dtype_differs_from_the_operands(operand, bias):
    """bf16 out from fp8 or fp16 operands with an fp32/bf16/int32 bias."""
    g = _check_gemm(bias_to_bf16, {"a": operand, "b": operand, "bias": bias}, "bf16", 1e-2)
    if find_ptxas() is not None:
        _assemble_gemm(g, operand)


@algorithm
def count_positive(x: Tensor["M", "N"]):
    return sum(where(x > 0, 1, 0), over="N")


@algorithm
def row_reductions(x: Tensor["M", "N"]):
    return sum(x, over="N"), max(x, over="N"), min(x, over="N")


@algorithm
def column_reductions(x: Tensor["M", "N"]):
    return sum(x, over="M"), max(x, over="M"), min(x, over="M")


WALKED = Schedule.from_dict({"algorithm": "column_reductions", "grid": {"M": 16},
                             "block": {"N": {"threads": 64, "vector": 1}}})


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("algo, sizes, schedule", [
    (row_reductions, {"M": 67, "N": 45}, None),        # shuffles within a warp
    (row_reductions, {"M": 5, "N": 8191}, None),       # and across warps in shared memory
    (column_reductions, {"M": 101, "N": 45}, WALKED),  # a walked loop, then a finish
    (column_reductions, {"M": 101, "N": 333}, WALKED),  # accumulators in shared memory
    (count_positive, {"M": 67, "N": 45}, None),
])
def test_integer_reductions_are_exact(algo, sizes, schedule, dtype):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    # Max/min see the whole range (fp32 would round it); sums stay clear of overflow.
    x = rng.integers(info.min // 2 ** 12, info.max // 2 ** 12, (sizes["M"], sizes["N"]),
                     dtype=dtype)
    graph = algo.graph({"x": dtype})
    out = emulate(graph, schedule, sizes, {"x": x}, {}, "sm_90a")
    axis = 1 if algo is not column_reductions else 0
    refs = [np.sum(x > 0, axis=axis)] if algo is count_positive else \
        [np.sum(x.astype(object), axis=axis), x.max(axis=axis), x.min(axis=axis)]
    for key, ref in zip(sorted(out), refs):
        assert np.array_equal(np.asarray(out[key]).astype(object), ref.astype(object)), key
    if find_ptxas() is not None:
        for target in TARGETS:
            for kernel in compile_program(graph, schedule, sizes, False, target).kernels:
                assert len(assemble(kernel.ptx, target)) > 0


def test_unknown_reduction_kind_raises():
    b = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f")
                     .append_basic_block())
    with pytest.raises(NotImplementedError, match="prod"):
        combine(b, None, "prod", L.i32(1), L.i32(2))
    with pytest.raises(NotImplementedError, match="prod"):
        mathfns.reduce_identity("prod", np.int32)


def test_wgmma_tile_over_the_register_file_is_refused_before_ptxas():
    """bf16 192x256 is right on the CPU executor but ptxas has no registers for it (128
    accumulators in 128 registers a thread): refused by validation with what to change.
    192x192 takes 96 accumulators and assembles."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from matmul import matmul

    from plait.schedule import Schedule
    graph = matmul.graph({"a": "bf16", "b": "bf16"})
    sizes = {"M": 1024, "N": 1024, "K": 1024}

    def schedule(n):
        return Schedule.from_dict({"algorithm": "matmul",
                                   "contraction": {"tile": {"M": 192, "N": n, "K": 64}}})
    with pytest.raises(PlaitError, match="leave 128 registers a thread"):
        compile_program(graph, schedule(256), sizes, True, "sm_90a")
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    for kernel in compile_program(graph, schedule(192), sizes, True, "sm_90a").kernels:
        assert len(assemble(kernel.ptx, "sm_90a")) > 0


def test_emitter_refuses_a_constant_that_would_be_truncated():
    assert L.i32(2**32 - 1).constant == 2**32 - 1 and L.i32(-2**31).constant == -2**31
    for bad in (2**32, 2**32 + 1, -2**31 - 1):
        with pytest.raises(OverflowError):
            L.i32(bad)
