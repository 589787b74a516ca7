"""A gradient is stored like its input: d<w> of `w: Tensor["N", "K"]` is [N, K], whatever
the algorithm's canonical order (which would give [K, N]: silently wrong when N == K)."""
import ml_dtypes
import numpy as np
import pytest

from plait.autodiff import grad
from plait.dsl import DType, Tensor, algorithm, sum
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.runtime.ptxas import assemble, find_ptxas


@algorithm
def linear(a: Tensor["M", "K"], w: Tensor["N", "K"]):        # nn.Linear's weight layout
    return sum(a * w, over="K")


@algorithm
def linear_at(a: Tensor["K", "M"], w: Tensor["K", "N"]):     # a stored transposed
    return sum(a * w, over="K")


@algorithm
def bmm_nk(a: Tensor["B", "M", "K"], b: Tensor["B", "N", "K"]):
    return sum(a * b, over="K")


def _reference(name, x, y, dy):
    """dx, dy of out = x @ y in float64 numpy, in each input's own storage order."""
    x, y, dy = (v.astype(np.float64) for v in (x, y, dy))
    if name == "linear":        # out[M,N] = a[M,K] w[N,K]^T
        return dy @ y, dy.T @ x
    if name == "linear_at":     # out[M,N] = a[K,M]^T w[K,N]
        return (dy @ y.T).T, x @ dy
    return dy @ y, np.swapaxes(dy, 1, 2) @ x     # bmm_nk: out[B,M,N] = a[B,M,K] b[B,N,K]^T


CASES = {"linear": (linear, "w"), "linear_at": (linear_at, "w"), "bmm_nk": (bmm_nk, "b")}
SIZES = [{"B": 3, "M": 37, "N": 24, "K": 24},        # N == K: a transposed dw has dw's shape
         {"B": 2, "M": 29, "N": 19, "K": 45}]


def _inputs(algo, sizes, dtype, rng):
    arrays = {p.name: rng.standard_normal([sizes[a] for a in p.axes]).astype(np.float32)
              for p in algo.tensor_params}
    out_axes = [a for a in ("B", "M", "N") if any(a in p.axes for p in algo.tensor_params)]
    arrays["dout"] = rng.standard_normal([sizes[a] for a in out_axes]).astype(np.float32)
    return {k: v.astype(dtype.numpy) for k, v in arrays.items()}


@pytest.mark.parametrize("sizes", SIZES, ids=["n_eq_k", "odd"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_has_its_inputs_axes_and_values(name, sizes):
    algo, second = CASES[name]
    rng = np.random.default_rng(len(name) + sizes["K"])
    inputs = _inputs(algo, sizes, DType.FP32, rng)
    graph = grad(algo).graph()
    out = emulate(graph, None, sizes, inputs, {})
    first = algo.tensor_params[0].name
    want = dict(zip((f"d{first}", f"d{second}"),
                    _reference(name, inputs[first], inputs[second], inputs["dout"])))
    for key, ref in want.items():
        source = inputs[key[1:]]
        assert out[key].shape == source.shape, (key, out[key].shape, source.shape)
        err = np.abs(out[key] - ref).max() / np.abs(ref).max()
        assert err < 1e-5, (key, err)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tensor_core_gradient_is_stored_like_its_input(name):
    """bf16 with 16-byte rows: the transposed-output contraction stays on tensor cores."""
    algo, second = CASES[name]
    sizes = {"B": 2, "M": 64, "N": 48, "K": 48}
    rng = np.random.default_rng(7)
    inputs = _inputs(algo, sizes, DType.BF16, rng)
    graph = grad(algo).graph({k: DType.BF16 for k in inputs})
    low = lower(graph, None, sizes, True, "sm_90a")
    assert all(type(t).__name__ == "GemmProgram" for t in low.threads), \
        low.kernel_graph.text()
    out = emulate(graph, None, sizes, inputs, {})
    ref = _reference(name, inputs[algo.tensor_params[0].name], inputs[second], inputs["dout"])[1]
    got = out[f"d{second}"].astype(np.float64)
    assert got.shape == inputs[second].shape
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-2
    if find_ptxas() is None:
        pytest.skip("no ptxas")
    for target in ("sm_80", "sm_90a"):
        for kernel in compile_program(graph, None, sizes, True, target).kernels:
            assert len(assemble(kernel.ptx, target)) > 0


def test_permute_is_refused_with_other_axes():
    from plait.dsl import PlaitError, permute

    @algorithm
    def bad(x: Tensor["M", "N"]):
        return permute(x, "N", "Q")

    with pytest.raises(PlaitError, match="must be x's own"):
        bad.graph()


def test_permuted_output_is_written_in_that_order():
    from plait.dsl import permute

    @algorithm
    def transposed(x: Tensor["M", "N"]):
        return permute(x * 2.0, "N", "M")

    x = np.random.default_rng(3).standard_normal((5, 7)).astype(ml_dtypes.bfloat16)
    sizes = {"M": 5, "N": 7}
    out = emulate(transposed.graph({"x": DType.BF16}), None, sizes, {"x": x}, {})["out"]
    assert out.shape == (7, 5)
    np.testing.assert_array_equal(out.astype(np.float32), (x.astype(np.float32) * 2).T)


def test_storage_order_survives_source_round_trip():
    """The derived source says permute(...), and from_source traces it back to [N, K]."""
    from plait.autodiff import to_source
    from plait.autodiff.source import from_source
    src = to_source(grad(linear))
    assert 'permute(' in src and '"N", "K"' in src
    again = from_source(src).graph()
    assert again.outputs["dw"].axes == ("N", "K")
