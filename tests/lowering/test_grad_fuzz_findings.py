"""What the gradient fuzzer found on an H100 run (2026-12-07, seeds 3004584..~3010700), kept
as explicit cases; each program run here is also compiled for sm_80 and sm_90a and
assembled (conftest.py wraps emulate).

- A tie mask across kernels: max's (min's) gradient compares x with max(x); when max(x)
  is stored in a bf16 temporary by one kernel and x recomputed in fp32 by another, no
  element was equal, the tie count was 0 and the gradient NaN (seeds 3006874, 3004594,
  3010085, 3010091). A comparison now reads each operand in its own dtype.
- Ties of max over several axes share the gradient evenly over all tied elements (as
  torch.amax over several dims), not level by level (seeds 3007265, 3008749).
- A loop with several accumulators, the second reduced after it: the emitter knew only a
  loop's first result (seed 3006925, KeyError while emitting).
"""
import numpy as np
import ml_dtypes
import pytest

from plait.autodiff import grad
from plait.dsl import DType, Tensor, algorithm, evaluate, index, logical_or, max, min, tanh, where
from plait.lowering.pipeline import emulate, lower
from plait.schedule import Schedule, validate

BF16 = ml_dtypes.bfloat16


@algorithm
def min_of_tanh(x: Tensor["M", "bf16"], y: Tensor["M", "N", "bf16"]):
    return {"low": min(tanh(x), over="M"), "scaled": y * x}


@pytest.mark.parametrize("m,n,seed", [(8, 6, 0), (37, 5, 1), (300, 3, 2)])
def test_min_tie_mask_across_kernels_in_bf16(m, n, seed):
    rng = np.random.default_rng(seed)
    bwd = grad(min_of_tanh)
    g = bwd.graph({"x": "bf16", "y": "bf16"})
    args = {"x": rng.standard_normal(m).astype(BF16),
            "y": rng.standard_normal((m, n)).astype(BF16),
            "dlow": np.asarray(rng.standard_normal(), BF16),
            "dscaled": rng.standard_normal((m, n)).astype(BF16)}
    got = emulate(g, None, {"M": m, "N": n}, args, {})["dx"].astype(np.float64)
    x = args["x"].astype(np.float64)
    t = np.tanh(args["x"].astype(np.float32)).astype(BF16).astype(np.float64)
    hit = (t == t.min()).astype(np.float64)
    want = (args["y"].astype(np.float64) * args["dscaled"].astype(np.float64)).sum(1) \
        + hit / hit.sum() * float(args["dlow"]) * (1 - np.tanh(x) ** 2)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=0.03, atol=0.03 * np.abs(want).max())


def test_a_comparison_reads_a_recomputed_bf16_value_rounded():
    """The tile program comparing tanh(x) (fp32 in registers) with the stored bf16 min
    rounds tanh(x) to bf16 first."""
    low = lower(grad(min_of_tanh).graph({"x": "bf16", "y": "bf16"}), None,
                {"M": 300, "N": 3}, True, "sm_90a")
    compares = [(t, op) for t in low.tiles for op in t.ops if op.op == "eq"]
    assert compares
    for t, op in compares:
        sources = [t.ops[a] for a in op.args]
        assert any(s.op == "round" and s.attr("round") == DType.BF16
                   for s in sources), t.text()


@algorithm
def max_over_two(x: Tensor["M", "N"]):
    return max(x, over=("M", "N"))


@algorithm
def min_of_mins(x: Tensor["B", "M", "N"]):
    return min(min(x, over="M"), over="N")


@pytest.mark.parametrize("shape,seed", [((4, 6), 0), ((33, 3), 1), ((1, 9), 2)])
def test_ties_of_max_over_several_axes_share_evenly(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, shape).astype(np.float32)     # many ties, unevenly per row
    x[rng.integers(shape[0]), :] = 2.0                     # one full row of the max
    g = grad(max_over_two).graph()
    dout = np.asarray(rng.standard_normal(), np.float32)
    hit = (x == x.max()).astype(np.float64)
    want = hit / hit.sum() * float(dout)
    sizes = {"M": shape[0], "N": shape[1]}
    np.testing.assert_allclose(evaluate(g, {"x": x, "dout": dout})["dx"], want, rtol=1e-12)
    got = emulate(g, None, sizes, {"x": x, "dout": dout}, {})["dx"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_ties_of_nested_mins_match_torch_amin():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 1, (3, 5, 4)).astype(np.float32)
    dout = rng.standard_normal(3).astype(np.float32)
    g = grad(min_of_mins).graph()
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    torch.amin(xt, dim=(1, 2)).backward(torch.tensor(dout, dtype=torch.float64))
    got = emulate(g, None, {"B": 3, "M": 5, "N": 4}, {"x": x, "dout": dout}, {})["dx"]
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-6, atol=1e-7)


@algorithm
def masked_sums(m0: Tensor["M", "N", "B", "bool"], x1: Tensor["M"]):
    inner = where(logical_or(m0, index("B") > index("M")), x1, x1)
    return {"out0": x1, "out1": where(m0, x1 - x1, inner)}


@pytest.mark.parametrize("m,n", [(1, 4), (5, 20)])
def test_loop_with_three_accumulators_reduced_after_it(m, n):
    rng = np.random.default_rng(4)
    sizes = {"B": 3, "M": m, "N": n}
    g = grad(masked_sums, wrt=["x1"]).graph()
    m0 = rng.random((m, n, 3)) < 0.4
    args = {"m0": m0, "x1": rng.standard_normal(m).astype(np.float32),
            "dout0": rng.standard_normal(m).astype(np.float32),
            "dout1": rng.standard_normal((m, n, 3)).astype(np.float32)}
    schedule = validate(Schedule.from_dict({"algorithm": g.name, "grid": {"N": 16},
                                            "block": {"B": {"threads": 256, "vector": 8}}}), g)
    got = emulate(g, schedule, sizes, args, {})["dx1"]
    # out1 is x1 on either branch of the inner where, and 0 under m0
    want = args["dout0"].astype(np.float64) + np.where(m0, 0.0, args["dout1"]).sum((1, 2))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@algorithm
def min_of_difference(x1: Tensor["M", "bf16"], x2: Tensor["N", "bf16"]):
    return min(x1 - x2, over="M")


@pytest.mark.parametrize("m,n,block", [
    (5, 7, None),                                   # seed 3011053 (its schedule refused)
    (300, 3, None),
    (37, 40, {"M": {"threads": 32}, "N": {"threads": 4, "vector": 4}})])
def test_min_split_in_fp32_temporaries_keeps_its_ties(m, n, block):
    """The split min stores fp32 partials and total: the comparison reading that total
    must not round the recomputed x1 - x2 to bf16 (a first fix did: every tie lost)."""
    rng = np.random.default_rng(m)
    g = grad(min_of_difference).graph({"x1": "bf16", "x2": "bf16"})
    args = {"x1": rng.standard_normal(m).astype(BF16), "x2": rng.standard_normal(n).astype(BF16),
            "dout": rng.standard_normal(n).astype(BF16)}
    schedule = None if block is None else validate(
        Schedule.from_dict({"algorithm": g.name, "block": block}), g)
    got = emulate(g, schedule, {"M": m, "N": n}, args, {})
    t = args["x1"].astype(np.float64)[:, None] - args["x2"].astype(np.float64)[None, :]
    hit = (t == t.min(0)).astype(np.float64)
    share = hit / hit.sum(0) * args["dout"].astype(np.float64)
    np.testing.assert_allclose(got["dx1"].astype(np.float64), share.sum(1), rtol=0.02, atol=0.02)
    np.testing.assert_allclose(got["dx2"].astype(np.float64), -share.sum(0), rtol=0.02, atol=0.02)
