"""Other tensors read element by element inside tensor-core kernels (the streamed
attention's scores, a GEMM's epilogue: lowering/nvptx/elements.py), in every storage
dtype: int32 and int64 biases (converted, not taken as float bits), a bf16 bias (decoded
from its bits), a bool mask. The CPU executor against numpy float64, and every program
compiled and assembled for sm_80 and sm_90a (an int32 bias on the attention scores was a
compile crash: the int was used as a float)."""
import ml_dtypes
import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, softmax, sum, where
from plait.lowering.gemm.plan import GemmProgram
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.lowering.stream.plan import StreamKernel
from plait.runtime.ptxas import assemble, find_ptxas

ATTENTION = {"B": 1, "H": 2, "S": 45, "T": 77, "D": 32}
GEMM = {"M": 67, "N": 45, "K": 40}


@algorithm
def biased_attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                     v: Tensor["B", "H", "T", "D"], bias: Tensor["S", "T"],
                     keep: Tensor["B", "T", "bool"]):
    s = where(keep, sum(q * k, over="D") * 0.125 + bias, float("-inf"))
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def biased_matmul(a: Tensor["M", "K"], w: Tensor["N", "K"], bias: Tensor["N"],
                  keep: Tensor["M", "N", "bool"]):
    return where(keep, sum(a * w, over="K") + bias, 0.0)


def _attention_reference(q, k, v, bias, keep):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = np.einsum("bhsd,bhtd->bhst", q, k) * 0.125 + np.asarray(bias, np.float64)
    s = np.where(keep[:, None, None, :], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhst,bhtd->bhsd", p / p.sum(-1, keepdims=True), v)


def _bias(rng, shape, dtype):
    if dtype in ("int32", "int64"):
        return rng.integers(-3, 4, shape).astype(dtype)
    return (rng.standard_normal(shape) * 2).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("bias_dtype", ["int32", "int64", "bf16"])
def test_attention_reads_bias_and_mask_tensors(bias_dtype):
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 2, n, 32)).astype(ml_dtypes.bfloat16)
               for n in (ATTENTION["S"], ATTENTION["T"], ATTENTION["T"]))
    bias = _bias(rng, (ATTENTION["S"], ATTENTION["T"]), bias_dtype)
    keep = rng.random((1, ATTENTION["T"])) < 0.8
    keep[:, 0] = True                          # every query sees some key
    graph = biased_attention.graph({"q": "bf16", "k": "bf16", "v": "bf16",
                                    "bias": bias_dtype})
    low = lower(graph, None, ATTENTION, True, "sm_90a")
    assert [type(t) for t in low.threads] == [StreamKernel], low.kernel_graph.text()
    out = emulate(graph, None, ATTENTION, {"q": q, "k": k, "v": v, "bias": bias,
                                           "keep": keep}, {}, "sm_90a")["out"]
    ref = _attention_reference(q, k, v, bias, keep)
    assert np.abs(np.asarray(out, np.float64) - ref).max() < 4 * 2.0 ** -8 * np.abs(ref).max()


@pytest.mark.parametrize("bias_dtype", ["int32", "int64", "bf16"])
def test_matmul_epilogue_reads_bias_and_mask_tensors(bias_dtype):
    rng = np.random.default_rng(8)
    a = rng.standard_normal((GEMM["M"], GEMM["K"])).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((GEMM["N"], GEMM["K"])).astype(ml_dtypes.bfloat16)
    bias = _bias(rng, (GEMM["N"],), bias_dtype)
    keep = rng.random((GEMM["M"], GEMM["N"])) < 0.5
    graph = biased_matmul.graph({"a": "bf16", "w": "bf16", "bias": bias_dtype})
    out = emulate(graph, None, GEMM, {"a": a, "w": w, "bias": bias, "keep": keep}, {},
                  "sm_90a")["out"]
    ref = np.where(keep, np.asarray(a, np.float64) @ np.asarray(w, np.float64).T
                   + np.asarray(bias, np.float64), 0.0)
    np.testing.assert_allclose(np.asarray(out, np.float64), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("bias_dtype", ["int32", "int64", "bf16"])
@pytest.mark.parametrize("algo, dtypes, sizes", [
    (biased_attention, {"q": "bf16", "k": "bf16", "v": "bf16"}, ATTENTION),
    (biased_matmul, {"a": "bf16", "w": "bf16"}, {"M": 256, "N": 256, "K": 128}),
], ids=["attention", "matmul"])
def test_tensor_operands_assemble(algo, dtypes, sizes, bias_dtype, target):
    graph = algo.graph({**dtypes, "bias": bias_dtype})
    kinds = {type(t) for t in lower(graph, None, sizes, True, target).threads}
    assert kinds == {StreamKernel if algo is biased_attention else GemmProgram}, kinds
    for kernel in compile_program(graph, None, sizes, True, target).kernels:
        assemble(kernel.ptx, target)
