"""What a plait.torch_op costs in eager mode, cut to the handle and little else.

`OpHandles`: an op's implementation (and its backward's) runs plait.compile handles
kept per op, most recently used first, found by `Compiled.matches`: no key is built
and nothing is bound again for a call like an earlier one. A call no handle matches
builds one (plait.compile checks the arguments as plait.run would).

`PlainCall`: torch's custom-op dispatch costs tens of microseconds per call (the
autograd wrapper, the redispatch, the dynamo-disable wrapper) even when nothing needs
it. `values` binds a call cheaply where it is plain: CUDA tensors that are exactly
torch.Tensor, given by position; scalars Python numbers; and nothing that would see or
change an op call — no dispatch or torch-function mode, functorch transform,
forward-mode AD, JIT tracer or profiler (`intercepted`). Then, unless a tensor requires
grad (`needs_autograd`), the wrapper calls the implementation's handle itself: the same
handle, the same checks, the same result; torch sees no op call. With grad, the op
is called, but a call a kept handle matches is not bound and checked again.
"""
from __future__ import annotations

import threading

import torch

_KEPT = 8                   # handles per op: a few shapes in turn, then the oldest goes
_NO_DEFAULT = object()


class OpHandles:
    """The compiled handles an op's implementation runs, for `algo` and `schedule`."""

    def __init__(self, algo, schedule):
        self.algo, self.schedule = algo, schedule
        self.tensor_at = [i for i, p in enumerate(algo.params) if p.is_tensor]
        self.scalar_at = [(p.name, i) for i, p in enumerate(algo.params) if not p.is_tensor]
        n = len(self.tensor_at)
        # tensors first: two slices split a call (else each argument is picked)
        self.first = n if self.tensor_at == list(range(n)) else None
        self.scalar_names = [name for name, _ in self.scalar_at]
        self.handles: list = []
        self._lock = threading.Lock()      # for reordering; a lookup reads a snapshot

    def split(self, values) -> tuple[list, dict]:
        """(tensors in order, scalars by name) of `values` in signature order."""
        n = self.first
        if n is not None:
            return values[:n], dict(zip(self.scalar_names, values[n:]))
        return [values[i] for i in self.tensor_at], {n: values[i] for n, i in self.scalar_at}

    def find(self, tensors):
        """The kept handle a call on `tensors` runs as built, or None."""
        for h in self.handles:
            if h.matches(tensors):
                return h
        return None

    def try_call(self, values):
        """The handle's result for `values` (signature order), or None where no kept
        handle matches them."""
        tensors, scalars = self.split(values)
        handles = self.handles
        for h in handles:
            out = h.try_call(tensors, scalars)
            if out is not None:
                if h is not handles[0]:
                    self._first(h)
                return out
        return None

    def call(self, values):
        """As try_call, building (and keeping) a handle where none matches."""
        out = self.try_call(values)
        if out is not None:
            return out
        import plait
        tensors, scalars = self.split(values)
        device = "cpu" if tensors[0].device.type == "cpu" else "gpu"
        h = plait.compile(self.algo, like=tuple(tensors), schedule=self.schedule,
                          device=device, **scalars)
        self._first(h)
        return h.call(tensors, scalars)

    def _first(self, h) -> None:
        with self._lock:
            kept = [h] + [k for k in self.handles if k is not h]
            self.handles = kept[:_KEPT]


class PlainCall:
    """How a call of the wrapper of `algo` binds when it is plain (see the module doc)."""

    device_flag = "is_cuda"          # the tensor attribute saying a call may be plain

    def __init__(self, algo, wrt):
        params = algo.params
        self.tensor_at = [i for i, p in enumerate(params) if p.is_tensor]
        self.n_tensors, self.n_params = len(self.tensor_at), len(params)
        # tensors first (the forward's usual signature), else no call is plain
        self.usable = self.n_tensors > 0 and self.tensor_at == list(range(self.n_tensors))
        self.defaults = [_NO_DEFAULT if p.is_tensor or p.default is None else p.default
                         for p in params]
        self.scalar_index = {p.name: i for i, p in enumerate(params) if not p.is_tensor}
        self.scalar_float = [(i, p.dtype is None or p.dtype.is_float)
                             for i, p in enumerate(params) if not p.is_tensor]
        self.differentiable = [(i, p.name in wrt) for i, p in enumerate(params) if p.is_tensor]

    def values(self, args, kwargs) -> list | None:
        """The arguments in signature order with defaults, or None where the call is not
        plain (the caller then binds and checks it the general way)."""
        n = len(args)
        if not self.usable or n < self.n_tensors or n > self.n_params or intercepted():
            return None
        values = list(args) + self.defaults[n:]
        for name, v in kwargs.items():
            i = self.scalar_index.get(name)
            if i is None or i < n:
                return None
            values[i] = v
        for i in self.tensor_at:
            if type(values[i]) is not torch.Tensor:
                return None
        if not getattr(values[0], self.device_flag):   # CPU executor or meta: the op
            return None
        for i, is_float in self.scalar_float:
            kind = type(values[i])         # bool is not int here, nor a missing default
            if kind is int:
                if is_float:
                    values[i] = float(values[i])
            elif kind is not float or not is_float:
                return None
        return values

    def grads_allowed(self, values) -> bool:
        """No tensor requires grad that the op does not differentiate (those are refused
        by the general path, with the message saying so)."""
        for i, allowed in self.differentiable:
            t = values[i]
            if t.requires_grad and not (allowed and t.is_floating_point()):
                return False
        return True

    def needs_autograd(self, values) -> bool:
        for i in self.tensor_at:
            if values[i].requires_grad:
                return True
        return False


_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_transforms = torch._C._functorch.peek_interpreter_stack
_forward_ad = torch.autograd.forward_ad
_tracing = torch._C._get_tracing_state
_profiling = torch._C._autograd._profiler_enabled


def intercepted() -> bool:
    """Whether anything would see (or change) an op call that a direct call skips."""
    return bool(_dispatch_modes() or _function_modes() or _transforms() is not None
                or _forward_ad._current_level >= 0 or _tracing() is not None
                or _profiling())
