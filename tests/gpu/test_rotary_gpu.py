"""Tier 2: the rotary examples and their derived gradients on the GPU, against torch
autograd in float64 written as Hugging Face writes rotary (cat(-x2, x1); the interleaved
pairs of GPT-J), at odd positions and head sizes, default schedules."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402

TOL = {torch.bfloat16: 2e-2, torch.float32: 1e-5}
SHAPES = [(2, 3, 37, 24), (1, 5, 1001, 96), (2, 4, 513, 128)]


def rotate_half(x, interleaved):
    if interleaved:
        return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), -1)


def llama_tables(s, d, base=10000.0):
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64, device="cuda") / d)
    freqs = torch.outer(torch.arange(s, dtype=torch.float64, device="cuda"), inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos(), emb.sin()


def _tolerance(name, dtype, s):
    """rotary_llama computes its angles s * base^(-2j/D) in fp32 in the kernel (as HF's
    LLaMA does): an angle near s carries s * 2^-24 of rounding, so fp32 results at long
    positions differ from float64 tables by that much, not by fp32's ulp."""
    if name == "rotary_llama" and dtype == torch.float32:
        return TOL[dtype] + 4 * 2.0 ** -24 * s
    return TOL[dtype]


def _rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["rotary", "rotary_llama", "rotary_interleaved"])
def test_rotary_and_its_gradients_match_torch(name, shape, dtype):
    import rotary as examples
    algo = getattr(examples, name)
    b, h, s, d = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)

    def r(*dims):
        return torch.randn(*dims, generator=gen, device="cuda").to(dtype)
    x, dout = r(b, h, s, d), r(b, h, s, d)
    tables = {} if name == "rotary_llama" else {"cos": r(s, d), "sin": r(s, d)}
    out = plait.run(algo, x=x, **tables)
    got = plait.run(grad(algo), x=x, dout=dout, **tables)
    torch.cuda.synchronize()

    leaves = {"x": x.double().requires_grad_()}
    leaves.update({k: v.double().requires_grad_() for k, v in tables.items()})
    cos, sin = (leaves["cos"], leaves["sin"]) if tables else llama_tables(s, d)
    want = leaves["x"] * cos + rotate_half(leaves["x"], name == "rotary_interleaved") * sin
    tol = _tolerance(name, dtype, s)
    assert out.dtype == dtype and _rel(out, want.detach()) < tol
    want.backward(dout.double())
    got = got if isinstance(got, dict) else {"dx": got}
    assert set(got) == {"d" + k for k in leaves}
    for k, leaf in leaves.items():
        err = _rel(got["d" + k], leaf.grad)
        assert err < tol, f"d{k}: max_rel_err {err}"
