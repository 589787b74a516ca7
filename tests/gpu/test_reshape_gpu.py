"""Tier 2: split_axis, merge_axes, slice, pad and concat on the GPU, against torch's
reshape, narrow, F.pad and torch.cat on cuda, at odd sizes (C = 300 into 5 x 60, slices
at unaligned starts, concat of differently sized operands), permuted storage orders,
fp32, bf16, int32 and bool; a chain fused into its consumer; gradients against torch
autograd in float64."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import torch.nn.functional as F  # noqa: E402

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402
from plait.dsl import Tensor, algorithm, concat, exp, merge_axes, pad, split_axis, sum  # noqa: E402

KINDS = {"fp32": torch.float32, "bf16": torch.bfloat16, "int32": torch.int32,
         "bool": torch.bool}


def _values(shape, kind, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if kind == "bool":
        return torch.rand(shape, device="cuda", generator=gen) < 0.5
    if kind == "int32":
        return torch.randint(-10 ** 6, 10 ** 6, shape, device="cuda", generator=gen,
                             dtype=torch.int32)
    return torch.randn(shape, device="cuda", generator=gen).to(KINDS[kind])


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("b, c, d", [(7, 300, 60), (4097, 1536, 128)])
def test_split_and_merge_match_torch_reshape(b, c, d, kind):
    @algorithm
    def heads(x: Tensor["B", "C", kind], y: Tensor["T", "E", "B", kind]):
        return {"h": split_axis(x, "C", ("H", "D"), D=d),
                "n": merge_axes(y, ("B", "T"), "N")}
    x, y = _values((b, c), kind, c), _values((13, 9, b), kind, b)
    out = plait.run(heads, x, y)
    assert torch.equal(out["h"], x.reshape(b, c // d, d))
    assert torch.equal(out["n"], y.permute(2, 0, 1).reshape(b * 13, 9))


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("t", [301, 8191])
def test_slice_pad_concat_match_torch(t, kind):
    value = {"fp32": -2.5, "bf16": 0.5, "int32": 7, "bool": True}[kind]

    @algorithm
    def ranges(x: Tensor["B", "T", kind], a: Tensor["Ta", "B", kind],
               b: Tensor["B", "Tb", kind]):
        return {"s": x.slice(T=(13, 142), into="S"),
                "p": pad(x, T=(3, 11), into="P", value=value),
                "c": concat([a, b], over=("Ta", "Tb"), into="C")}
    x, a, b = _values((3, t), kind, t), _values((5, 3), kind, 5), _values((3, 37), kind, 37)
    out = plait.run(ranges, x, a, b)
    assert torch.equal(out["s"], x[:, 13:142])
    padded = F.pad(x.to(torch.float64), (3, 11), value=float(value)).to(x.dtype)
    assert torch.equal(out["p"], padded)
    assert torch.equal(out["c"], torch.cat([a, b.t()], 0).t())


def test_a_chain_fused_into_its_reduction_matches_torch():
    @algorithm
    def rows(x: Tensor["B", "C"], w: Tensor["D"]):
        heads = split_axis(x, "C", ("H", "D"), D=37)
        window = pad(heads.slice(H=(1, 4), into="G"), D=(2, 1), into="P", value=1.0)
        return sum(exp(window) * pad(w, D=(2, 1), into="P"), over="P")
    x, w = _values((1031, 185), "fp32", 1), _values((37,), "fp32", 2)
    got = plait.run(rows, x, w)
    heads = F.pad(x.double().reshape(1031, 5, 37)[:, 1:4], (2, 1), value=1.0)
    terms = heads.exp() * F.pad(w.double(), (2, 1))
    # w's signs cancel terms: the error of 40 fp32 products and adds scales with their
    # magnitudes, not with the (sometimes tiny) sum
    bound = 1e-5 * terms.abs().sum(-1)
    assert ((got.double() - terms.sum(-1)).abs() <= bound).all()


def test_gradients_match_torch_autograd():
    @algorithm
    def windows(x: Tensor["B", "T"], a: Tensor["B", "Ta"]):
        joined = concat([x, a], over=("T", "Ta"), into="J")
        return {"s": joined.slice(J=(4, 40), into="S") * 3.0,
                "h": split_axis(x, "T", ("G", "K"), K=7)}
    x, a = _values((300, 35), "fp32", 3), _values((300, 9), "fp32", 4)
    ds, dh = _values((300, 36), "fp32", 5), _values((300, 5, 7), "fp32", 6)
    got = plait.run(grad(windows, wrt=["x", "a"]), x, a, ds=ds, dh=dh)
    xl, al = x.double().requires_grad_(), a.double().requires_grad_()
    s = torch.cat([xl, al], 1)[:, 4:40] * 3.0
    h = xl.reshape(300, 5, 7)
    torch.autograd.backward([s, h], [ds.double(), dh.double()])
    torch.testing.assert_close(got["dx"].double(), xl.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got["da"].double(), al.grad, rtol=1e-6, atol=1e-6)
