"""A plait.torch_op's backward: gradients only for the inputs that require grad.

    backs = Backwards(qualname, algo, fwd_names, save, grad_schedule, full_bwd)
    wire_autograd(op, backs, n_user)      # register_autograd on the forward op

The op differentiates `wrt` (every float tensor by default), but a call often needs
fewer: cos/sin tables, masks and biases rarely require grad. The backward asks
autograd which inputs need a gradient (`ctx.needs_input_grad`) and runs the gradient
algorithm taken `wrt` exactly those, so the others are never computed and come back
None. Each wrt-set is one algorithm (`plait.autodiff.grad(algo, subset)`) and one
custom op, derived and registered at its first use and kept (`Backwards.get`): its
compiled handles are kept by the op, so a set is derived and compiled once per shape.
The full set's op is `plait::<name>_bwd`; a subset's `plait::<name>_bwd_<arg>_<arg>`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from plait.dsl.errors import PlaitError

from .torch_op_define import _define, _torch_dtype, output_meta


@dataclass(frozen=True)
class Backward:
    """The backward of one wrt-set: its op, algorithm and what it reads."""
    wrt: tuple[str, ...]
    op: object                 # the custom op (callable on tensors and scalars)
    algorithm: object          # the gradient algorithm (`<algo>.bwd`)
    handles: object            # the op's compiled handles (runtime/torch_op_eager.OpHandles)
    grad_names: tuple[str, ...]
    reads: tuple[str, ...]     # the gradient algorithm's parameters, in order


class Backwards:
    """The backward ops of one forward op, one per set of inputs differentiated."""

    def __init__(self, qualname: str, algo, fwd_names: list[str], save, grad_schedule,
                 full_bwd):
        self.qualname, self.algo, self.save = qualname, algo, save
        self.grad_schedule, self.fwd_names = grad_schedule, list(fwd_names)
        self.wrt = tuple(p.name for p in algo.params if p.name in set(full_bwd.wrt))
        self._lock = threading.Lock()
        self.variants: dict[tuple, Backward] = {}
        self.full = self._register(self.wrt, full_bwd, qualname + "_bwd")
        # What the backward may read of the forward's outputs: the saved intermediates and
        # an output itself where it is saved (attention's row term reads `out`); every
        # subset reads a part of what the full set reads.
        reads = set(self.full.reads)
        self.kept = [i for i, n in enumerate(self.fwd_names) if n in reads]

    def get(self, wrt: tuple[str, ...]) -> Backward:
        """The backward taken with respect to `wrt` (names in signature order)."""
        found = self.variants.get(wrt)
        if found is not None:
            return found
        from plait.autodiff.transform import grad
        with self._lock:
            if wrt not in self.variants:
                bwd = grad(self.algo, list(wrt), save=self.save)
                self._register(wrt, bwd, f"{self.qualname}_bwd_{'_'.join(wrt)}")
            return self.variants[wrt]

    def _register(self, wrt: tuple, bwd, qualname: str) -> Backward:
        grad_names = tuple(bwd.graph().outputs)
        op, handles = _define(qualname, bwd, self.grad_schedule, len(grad_names))
        made = Backward(wrt, op, bwd, handles, grad_names, tuple(p.name for p in bwd.params))
        self.variants[wrt] = made
        return made


def wire_autograd(op, backs: Backwards, n_user: int) -> None:
    """register_autograd: save the tensor inputs (and what the forward saved); the backward
    runs the op of the inputs that need a gradient, an output nobody used getting a zero
    cotangent."""
    import torch

    from plait.autodiff.reverse import grad_name
    algo, params = backs.algo, backs.algo.params
    wrt = set(backs.wrt)
    fwd_names = backs.fwd_names
    n_fwd = len(fwd_names)

    def setup_context(ctx, inputs, output):
        for p, v in zip(params, inputs):
            if p.is_tensor and p.name not in wrt and getattr(v, "requires_grad", False):
                raise PlaitError(f"{algo.name}: argument {p.name!r} requires grad, but this op "
                                 f"differentiates only {', '.join(backs.wrt)}; detach it")
        outs = [output] if n_fwd == 1 else list(output)
        tensors = [v for v in inputs if isinstance(v, torch.Tensor)]
        ctx.save_for_backward(*tensors, *(outs[i] for i in backs.kept))
        ctx.scalars = [None if isinstance(v, torch.Tensor) else v for v in inputs]
        ctx.n_tensors = len(tensors)

    def backward(ctx, *cotangents):
        asked = tuple(p.name for p, need in zip(params, ctx.needs_input_grad)
                      if need and p.name in wrt)
        if not asked:
            return (None,) * len(params)
        back = backs.get(asked)
        stored = list(ctx.saved_tensors)
        tensors, saved = iter(stored[:ctx.n_tensors]), stored[ctx.n_tensors:]
        values = [next(tensors) if s is None else s for s in ctx.scalars]
        meta = output_meta(algo, values)
        like = next(v for v in values if isinstance(v, torch.Tensor))
        cots = [like.new_zeros(shape, dtype=_torch_dtype(dtype)) if c is None else c.contiguous()
                for c, (shape, dtype) in zip(cotangents[:n_user], meta)]
        by_name = {p.name: v for p, v in zip(params, values)}
        by_name.update((grad_name(n), c) for n, c in zip(fwd_names[:n_user], cots))
        by_name.update(zip((fwd_names[i] for i in backs.kept), saved))
        grads = back.op(*(by_name[name] for name in back.reads))
        grads = dict(zip(back.grad_names, [grads] if len(back.grad_names) == 1 else grads))
        return tuple(grads.get(grad_name(p.name)) if p.name in asked else None for p in params)

    op.register_autograd(backward, setup_context=setup_context)
