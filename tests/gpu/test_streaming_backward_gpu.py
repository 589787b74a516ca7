"""Tier 2 twin of tests/lowering/test_streaming_backward.py: attention's derived, streamed
backward on the GPU against float64 gradients of the same inputs (odd shapes, masks,
fully masked rows, grouped queries), and trained through the torch bridge against torch
SDPA's autograd."""
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lowering"))
import plait  # noqa: E402
from plait.autodiff import forward_with_saved, grad, to_torch  # noqa: E402
from test_streaming import CASES, _extra, _shapes, grouped, grouped_causal  # noqa: E402
from test_streaming_backward import (GROUPED, NOT_GROUPED, grouped_reference_grads,  # noqa: E402
                                     late, reference_grads)

BIGGER = [(CASES[0][0], {"B": 2, "H": 3, "S": 1000, "T": 1337, "D": 128, "E": 128}),
          (CASES[2][0], {"B": 1, "H": 2, "S": 1000, "T": 1000, "D": 64, "E": 64}),
          (CASES[0][0], {"B": 1, "H": 2, "S": 384, "T": 1000, "D": 96, "E": 96}),
          (late, {"B": 1, "H": 2, "S": 80, "T": 70, "D": 16, "E": 24})]


# Grouped queries (dk, dv fold the group's heads into their loop): LLaMA-like 4 heads per
# group, odd lengths, S != T.
GROUPED_BIGGER = [(grouped, {"B": 1, "G": 2, "R": 4, "H": 1, "S": 777, "T": 1337, "D": 64,
                             "E": 64}),
                  (grouped_causal, {"B": 2, "G": 2, "R": 4, "H": 1, "S": 1000, "T": 1000,
                                    "D": 128, "E": 128})]


def _accumulated(bwd):
    """dq added up in the dk/dv kernel's loop (the default gives it a loop of its own)."""
    return {"algorithm": bwd.name, "kernels": {f"{bwd.name}.dq": {"reduction": "atomic"}}}


@pytest.mark.parametrize("dq", ["accumulated", "own loop"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("algo,sizes", NOT_GROUPED + BIGGER,
                         ids=lambda c: getattr(c, "name", None) or str(c.get("S", "")))
def test_streamed_backward_on_the_gpu(algo, sizes, dtype, dq):
    check_backward(algo, sizes, dtype, dq)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("algo,sizes", GROUPED + GROUPED_BIGGER,
                         ids=lambda c: getattr(c, "name", None) or str(c.get("S", "")))
def test_grouped_backward_on_the_gpu(algo, sizes, dtype):
    check_backward(algo, sizes, dtype, "own loop")


def test_rows_past_the_end_add_nothing_to_dq():
    """Scores near -128 everywhere: a row past the end of T (zero-filled k, score 0)
    would weigh exp(0 - lse) = inf, and 0 * inf is NaN; the accumulated dq must mask
    those rows (T = 1000 ends inside a block of 64)."""
    check_backward(CASES[0][0], {"B": 1, "H": 2, "S": 300, "T": 1000, "D": 64, "E": 64},
                   torch.bfloat16, "accumulated", offset=4.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("algo,sizes", NOT_GROUPED + BIGGER + GROUPED_BIGGER,
                         ids=lambda c: getattr(c, "name", None) or str(c.get("S", "")))
def test_backward_over_the_forward_log_sum_exp_on_the_gpu(algo, sizes, dtype):
    """The streamed forward writes lse beside out; the backward reads both (no
    log-sum-exp kernel), checked against the float64 gradients."""
    check_backward(algo, sizes, dtype, "own loop", save=("out", "lse"))


def check_backward(algo, sizes, dtype, dq, offset=0.0, save=("out",)):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=gen, device="cuda") * (0.1 if offset else 1)
               for shape in _shapes(sizes).values())
    q, k, v = (q + offset).to(dtype), (k - offset).to(dtype), v.to(dtype)
    dout = torch.randn(*q.shape[:-1], sizes["E"], generator=gen, device="cuda").to(dtype)
    scale = sizes["D"] ** -0.5
    extra = _extra(algo, sizes)
    arrays = [t.cpu().double().numpy() for t in (q, k, v, dout)]
    if (algo, sizes) in GROUPED + GROUPED_BIGGER:
        ref, out = grouped_reference_grads(algo.name, *arrays, scale)
    else:
        ref, out = reference_grads(algo.name, *arrays, scale, extra=extra)
    bwd = grad(algo, wrt=["q", "k", "v"], save=save)
    extra_t = {n: torch.from_numpy(a).cuda() for n, a in extra.items()}
    if "lse" in save:       # what plait's own forward saved, as a training step feeds it
        saved = plait.run(forward_with_saved(algo, save), q, k, v, **extra_t, scale=scale)
        assert saved["lse"].dtype == torch.float32
    else:   # out in the forward's dtype (the documents' fp32 bias promotes it to fp32)
        saved = {"out": torch.from_numpy(out).cuda().to(torch.float32 if extra else dtype)}
    got = plait.run(bwd, q, k, v, **extra_t, scale=scale, dout=dout, **saved,
                    schedule=_accumulated(bwd) if dq == "accumulated" else None)
    step = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    for name, want in ref.items():
        have = got[name].cpu().double().numpy()
        assert not np.isnan(have).any(), name
        assert np.abs(have - want).max() < 8 * step * max(1.0, np.abs(want).max()), name


def test_grouped_training_through_the_bridge_matches_sdpa():
    """q over [B, G, R, S, D] is torch's [B, G*R, S, D] viewed by group; SDPA's
    enable_gqa shares each k, v head the same way."""
    fn = to_torch(grouped_causal)
    gen = torch.Generator(device="cuda").manual_seed(2)
    b, g, r, n, d = 2, 2, 4, 333, 64
    shapes = [(b, g, r, n, d), (b, g, n, d), (b, g, n, d)]
    leaves = [torch.randn(*sh, generator=gen, device="cuda", dtype=torch.bfloat16)
              .requires_grad_() for sh in shapes]
    out = fn(*leaves, scale=0.125)
    dout = torch.randn_like(out)
    mine = torch.autograd.grad(out, leaves, dout)
    exact = [t.detach().double().requires_grad_() for t in leaves]
    ref = torch.nn.functional.scaled_dot_product_attention(
        exact[0].reshape(b, g * r, n, d), *exact[1:], is_causal=True, scale=0.125,
        enable_gqa=True)
    theirs = torch.autograd.grad(ref, exact, dout.double().reshape(b, g * r, n, d))
    for a, want in zip(mine, theirs):
        top = want.abs().max().item()
        assert (a.double() - want).abs().max().item() < 0.03 * top


@pytest.mark.parametrize("causal", [False, True])
def test_training_through_the_bridge_matches_sdpa(causal):
    """to_torch keeps the forward's output for the backward (its row term reads it) and
    the softmax's log-sum-exp (the streamed forward writes it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from attention import attention, causal_attention
    fn = to_torch(causal_attention if causal else attention)
    assert fn.saved == ("out", "lse")
    gen = torch.Generator(device="cuda").manual_seed(1)
    leaves = [torch.randn(2, 4, 333, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
              .requires_grad_() for _ in range(3)]
    out = fn(*leaves, scale=0.125)
    dout = torch.randn_like(out)
    mine = torch.autograd.grad(out, leaves, dout)
    exact = [t.detach().double().requires_grad_() for t in leaves]
    ref = torch.nn.functional.scaled_dot_product_attention(*exact, is_causal=causal, scale=0.125)
    theirs = torch.autograd.grad(ref, exact, dout.double())
    for a, b in zip(mine, theirs):
        top = b.abs().max().item()
        assert (a.double() - b).abs().max().item() < 0.03 * top
