"""Gradients only where asked (plait.torch_op's backward taken wrt the inputs that require
grad), as the CPU and GPU tests check them: against torch autograd in float64."""
import pytest

torch = pytest.importorskip("torch")

import plait  # noqa: E402
from plait.runtime.torch_op_eager import OpHandles  # noqa: E402
from torch_cases import CASES, load, make_inputs, max_rel_err, reference  # noqa: E402

# (example, inputs that require grad): proper subsets, so the full backward would compute more
SUBSETS = [("layernorm", ("x",)), ("layernorm", ("w", "b")), ("layernorm", ("x", "b")),
           ("rotary", ("x",)), ("matmul_bias_gelu", ("a", "bias")), ("attention", ("q",)),
           ("attention", ("k", "v")), ("swiglu", ("u",))]


class Ran:
    """The handles each OpHandles ran (a call leaves the handle that ran first)."""

    def __init__(self, monkeypatch):
        self.handles = []
        call = OpHandles.call

        def spy(handles, values):
            out = call(handles, values)
            self.handles.append(handles.handles[0])
            return out
        monkeypatch.setattr(OpHandles, "call", spy)

    def backward(self):
        return [h for h in self.handles if h.algorithm.name.endswith(".bwd")]


def check_subset(name, subset, gen, monkeypatch, device="cpu", call=None):
    """Asked-for gradients match float64 autograd, the others are None, and the gradient
    program that ran writes exactly the asked-for ones. `call(op, inputs, scalars)` runs
    the op (default: eagerly). Returns the backward handles that ran."""
    op = plait.torch_op(load(name))
    inputs = make_inputs(name, gen, device=device)
    for arg in subset:
        inputs[arg].requires_grad_()
    ran = Ran(monkeypatch)
    scalars = CASES[name].scalars
    out = (call or (lambda o, i, s: o(**i, **s)))(op, inputs, scalars)
    ref, wide = reference(name, inputs)
    cot = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    (out.double() * cot.to(out.device)).sum().backward()
    (ref * cot).sum().backward()
    for arg, t in inputs.items():
        if arg in subset:
            assert t.grad is not None, arg
            assert max_rel_err(t.grad, wide[arg].grad) <= 1e-3, arg
        else:
            assert t.grad is None, arg
    bwd = ran.backward()
    assert bwd, "no backward program ran"
    assert [list(h.outputs) for h in bwd] == [[f"d{a}" for a in subset]], \
        [h.outputs for h in bwd]
    full = [p.name for p in load(name).params if p.name in set(op.wrt)]
    assert len(bwd[0].outputs) < len(full)
    assert op.backwards.variants[tuple(subset)].handles.handles, "the set's op kept no handle"
    return bwd
