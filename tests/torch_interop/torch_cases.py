"""Every example in examples/, as the torch tests run it: small odd shapes, input dtypes, and
an independent torch expression computing the same thing in float64."""
import importlib
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


@dataclass(frozen=True)
class Case:
    shapes: dict                    # argument -> shape
    reference: object               # float64 torch function of the tensors (and scalars)
    dtypes: dict = field(default_factory=dict)   # argument -> torch dtype (else float32)
    scalars: dict = field(default_factory=dict)  # scalar arguments given explicitly
    grad: bool = True               # differentiate (every float32 input)
    scale: float = 1.0              # inputs drawn as standard normal times this
    opcheck_skips: tuple = ()       # opcheck tests torch itself cannot run on these dtypes
    algorithm: str | None = None    # the example's algorithm, where not named as its file
    indices: dict = field(default_factory=dict)  # argument -> exclusive bound of its ints
    pick: str | None = None         # of several outputs (by name), the reference's


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _erf_gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _hf_rotary(x, cos, sin):
    """transformers' apply_rotary_pos_emb: rotate_half is cat(-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _selective_scan(x, dt, A, Bm, C):
    """examples/selective_scan.py as a float64 loop over the sequence."""
    h = torch.zeros(x.shape[0], x.shape[2], A.shape[1], dtype=x.dtype, device=x.device)
    ys = []
    for t in range(x.shape[1]):
        step = dt[:, t, :, None]
        h = torch.exp(step * A) * h + step * Bm[:, t, None, :] * x[:, t, :, None]
        ys.append((C[:, t, None, :] * h).sum(-1))
    return torch.stack(ys, 1)


def _top8_token(logits, seed=0, temperature=1.0):
    """examples/topk_sampler.py's `top8` token: torch.topk, softmax, and the uniform of
    row b from an independent Philox (tests/random_cases.py) at counter b, key (seed, 0)."""
    from random_cases import uniform_want
    values, at = torch.topk(logits / temperature, 8, dim=-1)
    p = torch.softmax(values, -1)
    u = torch.from_numpy(uniform_want((logits.shape[0],), seed)).to(p.device, p.dtype)
    choice = ((p.cumsum(-1) <= u[:, None]).sum(-1)).clamp(max=7)
    return at.gather(-1, choice[:, None])[:, 0].to(torch.int32)


def pick(name, out):
    """The output a case's reference computes, where the algorithm has several."""
    return out if CASES[name].pick is None else out[CASES[name].pick]


CASES = {
    "layernorm": Case({"x": (5, 37), "w": (37,), "b": (37,)},
                      lambda x, w, b, eps=1e-5: F.layer_norm(x, (x.shape[-1],), w, b, eps),
                      scalars={"eps": 1e-3}),
    "rmsnorm": Case({"x": (3, 45), "w": (45,)}, _rms),
    "softmax": Case({"x": (4, 33)}, lambda x: torch.softmax(x, -1), scale=3.0),
    "causal_softmax": Case({"x": (35, 33)}, lambda x: torch.softmax(
        x.masked_fill(~torch.ones_like(x, dtype=torch.bool).tril(), float("-inf")), -1),
        scale=3.0),
    "swiglu": Case({"g": (3, 29), "u": (3, 29)}, lambda g, u: F.silu(g) * u),
    "geglu": Case({"g": (3, 31), "u": (3, 31)}, lambda g, u: _erf_gelu(g) * u),
    "matmul": Case({"a": (19, 21), "b": (21, 23)}, lambda a, b: a @ b),
    "bmm": Case({"a": (2, 9, 24), "b": (2, 24, 40)}, lambda a, b: a @ b,
                dtypes={"a": torch.bfloat16, "b": torch.bfloat16}, grad=False),
    "matmul_bias_gelu": Case({"a": (7, 13), "b": (13, 11), "bias": (11,)},
                             lambda a, b, bias: _erf_gelu(a @ b + bias)),
    "matmul_fp8": Case({"a": (17, 32), "b": (24, 32)},
                       lambda a, b, scale_a=1.0, scale_b=1.0: (a @ b.T) * (scale_a * scale_b),
                       dtypes={"a": torch.float8_e4m3fn, "b": torch.float8_e4m3fn},
                       scalars={"scale_a": 0.5, "scale_b": 1.5}, grad=False,
                       # SchemaCheckMode compares inputs before and after with a multiply
                       # that torch's CPU fp8 lacks ("mul_cpu_reduced_float")
                       opcheck_skips=("test_schema",)),
    # examples/attention.py's `attention` (the masked variants beside it are checked in
    # tests/dsl/test_attention_reference.py and tests/gpu/test_attention_gpu.py)
    "attention": Case({"q": (1, 2, 5, 8), "k": (1, 2, 7, 8), "v": (1, 2, 7, 8)},
                      lambda q, k, v, scale=0.125: F.scaled_dot_product_attention(
                          q, k, v, scale=scale), scalars={"scale": 0.3}),
    # examples/embedding.py's `embedding`: int64 token ids into a [V, D] table
    "embedding": Case({"ids": (11,), "table": (37, 24)},
                      lambda ids, table: table[ids.long()],
                      dtypes={"ids": torch.int64}, indices={"ids": 37}),
    # examples/sampling.py's `greedy`: int32 argmax over the vocabulary
    "sampling": Case({"logits": (3, 53)},
                     lambda logits: torch.argmax(logits, -1).to(torch.int32),
                     grad=False, algorithm="greedy"),
    # examples/selective_scan.py's `selective_scan`: a generic scan, not differentiable
    "selective_scan": Case({"x": (2, 37, 3), "dt": (2, 37, 3), "A": (3, 4), "Bm": (2, 37, 4),
                            "C": (2, 37, 4)}, _selective_scan, grad=False, scale=0.3,
                           algorithm="selective_scan"),
    # examples/rotary.py's `rotary` (the LLaMA and interleaved variants beside it are
    # checked in tests/lowering/test_rotary_kernels.py)
    "rotary": Case({"x": (2, 3, 5, 12), "cos": (5, 12), "sin": (5, 12)}, _hf_rotary),
    # examples/gated_mlp.py: silu(x . w1^T) * (x . w3^T)
    "gated_mlp": Case({"x": (7, 19), "w1": (13, 19), "w3": (13, 19)},
                      lambda x, w1, w3: F.silu(x @ w1.T) * (x @ w3.T)),
    # examples/embedding_cross_entropy.py's `lm_loss`: embedding, LM head, cross-entropy
    "embedding_cross_entropy": Case(
        {"ids": (11,), "labels": (11,), "table": (37, 24), "head": (37, 24)},
        lambda ids, labels, table, head: F.cross_entropy(table[ids.long()] @ head.T,
                                                         labels.long()),
        dtypes={"ids": torch.int64, "labels": torch.int64},
        indices={"ids": 37, "labels": 37}, algorithm="lm_loss"),
    # examples/topk_sampler.py's `top8`: the sampled token (of the outputs token and p)
    "topk_sampler": Case({"logits": (3, 53)}, _top8_token, grad=False, scale=2.0,
                         algorithm="top8", scalars={"seed": 5}, pick="token"),
}


def load(name):
    return getattr(importlib.import_module(name), CASES[name].algorithm or name)


def make_inputs(name, gen, device="cpu", requires_grad=False) -> dict:
    """Seeded tensors per argument, rounded to their dtype; float32 ones may require grad."""
    case = CASES[name]
    out = {}
    for arg, shape in case.shapes.items():
        dtype = case.dtypes.get(arg, torch.float32)
        if arg in case.indices:       # valid positions along the axis they index
            t = torch.randint(0, case.indices[arg], shape, generator=gen).to(dtype).to(device)
            out[arg] = t
            continue
        t = (torch.randn(*shape, generator=gen) * case.scale).to(dtype).to(device)
        out[arg] = t.requires_grad_(requires_grad and case.grad and dtype == torch.float32)
    return out


def reference(name, inputs: dict):
    """The case's torch expression in float64 on float64 copies (that keep requires_grad)."""
    case = CASES[name]
    wide = {k: v.detach().double().requires_grad_(v.requires_grad) for k, v in inputs.items()}
    return case.reference(*wide.values(), **case.scalars), wide


def tolerance(name) -> float:
    dtypes = set(CASES[name].dtypes.values())
    if torch.float8_e4m3fn in dtypes or torch.bfloat16 in dtypes:
        return 2e-2           # bf16 outputs (fp8 products are written out in bf16)
    return 1e-4


def max_rel_err(out, ref) -> float:
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    assert out.shape == ref.shape, (out.shape, ref.shape)
    return float((out - ref).abs().max() / ref.abs().max())


def example_names() -> list[str]:
    import os
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "examples")
    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py"))


__all__ = ["CASES", "load", "make_inputs", "reference", "tolerance", "max_rel_err",
           "example_names", "np"]
