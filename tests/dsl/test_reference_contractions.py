"""The float64 reference evaluates sums of products by einsum: memory of inputs + outputs."""
import numpy as np
import pytest

from plait.dsl import DType, Tensor, algorithm, evaluate, exp, round_to, sum


@algorithm
def matmul(a: Tensor["M", "K"], b: Tensor["K", "N"]):
    return sum(a * b, over="K")


@algorithm
def linear_nk(x: Tensor["B", "M", "K"], w: Tensor["N", "K"], s: Tensor["N"]):
    return sum(x * w * s, over="K")        # three factors, storage order w[N, K]


@algorithm
def two_axes(x: Tensor["B", "M", "K"], w: Tensor["K", "B", "N"]):
    return {"y": sum(x * w, over=("K", "B")), "z": exp(sum(x * 2.0 * w, over="K"))}


def test_a_matmul_too_big_to_materialise_runs_and_matches_numpy():
    # The old node-by-node product alone was 2048*1024*2048 float64 = 32 GiB.
    rng = np.random.default_rng()
    a = rng.standard_normal((2048, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 2048)).astype(np.float32)
    out = evaluate(matmul.graph(), {"a": a, "b": b})["out"]
    assert out.dtype == np.float64 and out.shape == (2048, 2048)
    np.testing.assert_allclose(out, np.matmul(a.astype(np.float64), b.astype(np.float64)),
                               rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("B, M, K, N", [(1, 1, 1, 1), (3, 5, 7, 11), (2, 13, 1, 6)])
def test_odd_shapes_storage_orders_and_batch_axes(B, M, K, N):
    rng = np.random.default_rng()
    x, w, s = rng.standard_normal((B, M, K)), rng.standard_normal((N, K)), rng.standard_normal(N)
    out = evaluate(linear_nk.graph(), {"x": x, "w": w, "s": s})["out"]
    np.testing.assert_allclose(out, np.matmul(x, w.T) * s, rtol=1e-12, atol=1e-12)
    w3 = rng.standard_normal((K, B, N))
    got = evaluate(two_axes.graph(), {"x": x, "w": w3})
    want_y = sum_loops(x, w3)
    np.testing.assert_allclose(got["y"], want_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["z"], np.exp(2 * np.einsum("bmk,kbn->bmn", x, w3)),
                               rtol=1e-12)


def sum_loops(x, w):
    """An independent y[m, n] = sum over k, b of x[b, m, k] * w[k, b, n]."""
    B, M, K = x.shape
    out = np.zeros((M, w.shape[2]))
    for b in range(B):
        for k in range(K):
            out += np.outer(x[b, :, k], w[k, b, :])
    return out


def test_a_product_that_is_also_an_output_is_still_materialised():
    @algorithm
    def both(a: Tensor["M", "K"], b: Tensor["K", "N"]):
        p = a * b
        return {"p": p, "y": sum(p, over="K")}
    rng = np.random.default_rng()
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    got = evaluate(both.graph(), {"a": a, "b": b})
    np.testing.assert_allclose(got["p"], a[:, :, None] * b[None], rtol=1e-15)
    np.testing.assert_allclose(got["y"], a @ b, rtol=1e-12)


def test_rounding_per_product_keeps_the_elementwise_semantics():
    """Under a bf16 compute rounding every product is rounded before the sum: einsum would not."""
    rng = np.random.default_rng()
    a, b = rng.standard_normal((6, 9)), rng.standard_normal((9, 5))
    got = evaluate(matmul.graph(), {"a": a, "b": b},
                   rounding=lambda n: DType.BF16 if n.op != "input" else None)["out"]
    prod = round_to(a[:, :, None] * b[None], DType.BF16)
    want = round_to(prod.sum(1), DType.BF16)
    np.testing.assert_array_equal(got, want)
