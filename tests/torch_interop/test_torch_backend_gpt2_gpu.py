"""The GPT-2-style model and its parts under torch.compile(backend="plait") on CUDA in
bf16, forward and backward, against float64 eager: plait's error within twice eager
bf16's (or 1e-2); the twin of test_torch_backend_gpt2_cpu.py and the attention, range
and reshape CPU tests."""
import copy

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import plait.runtime.torch_backend as backend  # noqa: E402
from plait.runtime import driver  # noqa: E402

from backend_models import GPT2, GPT2Block  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("fresh_backend"),
              pytest.mark.skipif(not driver.gpu_available(), reason="no CUDA GPU")]


def _rel(a, ref) -> float:
    return ((a.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _grads(model, out):
    out.backward()
    return [p.grad for p in model.parameters()]


def test_gpt2_loss_and_grads_gpu():
    torch.manual_seed(0)
    base = GPT2(1000, 129, 192, 6).cuda()
    idx = torch.randint(0, 1000, (3, 129), device="cuda")
    targets = torch.randint(0, 1000, (3, 129), device="cuda")
    ref_model = copy.deepcopy(base).double()
    eager_model = copy.deepcopy(base).to(torch.bfloat16)
    model = copy.deepcopy(base).to(torch.bfloat16)
    ref = [ref_model(idx, targets)]
    ref += _grads(ref_model, ref[0])
    eager = [eager_model(idx, targets)]
    eager += _grads(eager_model, eager[0])
    got = [torch.compile(model, backend="plait")(idx, targets)]
    got += _grads(model, got[0])
    for i, (g, e, r) in enumerate(zip(got, eager, ref)):
        assert _rel(g, r) <= max(2 * _rel(e, r), 1e-2), (i, _rel(g, r), _rel(e, r))
    s = backend.stats()
    assert s.get("region_calls", 0) >= 2 and s.get("fallback_calls", 0) == 0, s


def _check(fn, shapes, extra=()):
    torch.manual_seed(1)
    xs = [torch.randn(*s, device="cuda", dtype=torch.bfloat16) for s in shapes]
    outs = {}
    for kind in ("ref", "eager", "plait"):
        dt = torch.float64 if kind == "ref" else torch.bfloat16
        args = [x.to(dt).requires_grad_() for x in xs]
        # a module runs its float64 twin for the reference (its parameters are bf16)
        ref_fn = copy.deepcopy(fn).to(dt) if isinstance(fn, torch.nn.Module) else fn
        run = torch.compile(fn, backend="plait") if kind == "plait" else \
            ref_fn if kind == "ref" else fn
        y = run(*args, *(e.to(dt) if e.is_floating_point() else e for e in extra))
        y.double().pow(2).sum().backward()
        outs[kind] = [y] + [a.grad for a in args]
    for i, (g, e, r) in enumerate(zip(outs["plait"], outs["eager"], outs["ref"])):
        assert _rel(g, r) <= max(2 * _rel(e, r), 1e-2), (i, _rel(g, r), _rel(e, r))
    s = backend.stats()
    assert s.get("region_calls", 0) >= 2 and s.get("fallback_calls", 0) == 0, s


def test_gpt2_block_gpu():
    torch.manual_seed(2)
    model = GPT2Block(192, 6).cuda().to(torch.bfloat16)
    _check(model, [(3, 129, 192)])


def test_causal_sdpa_gpu():
    _check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
           [(2, 4, 300, 64)] * 3)


def test_gqa_sdpa_with_bool_mask_gpu():
    mask = torch.rand(37, 129, device="cuda") > 0.3
    mask[:, 0] = True
    _check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                             enable_gqa=True),
           [(2, 8, 37, 64), (2, 2, 129, 64), (2, 2, 129, 64)], (mask,))


def test_split_cat_and_reshapes_gpu():
    def f(x):
        b, t, c = x.shape
        q, k, v = x.split(c // 3, dim=-1)
        h = torch.cat([torch.tanh(q) * k, v], -1).view(b, t, 2, c // 3).transpose(1, 2)
        return torch.softmax(h, dim=-2).transpose(1, 2).reshape(b * t, -1)
    _check(f, [(3, 129, 300)])
