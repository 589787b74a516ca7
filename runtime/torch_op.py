"""`plait.torch_op`: a plait algorithm as a torch custom op that torch.compile sees through.

    ln = plait.torch_op(layernorm)            # registers torch.ops.plait.layernorm
    y = ln(x, w, b)                           # CUDA tensors: GPU kernels; CPU: the CPU executor
    y.sum().backward()                        # the derived backward, itself an op
    torch.compile(lambda x: ln(x, w, b), fullgraph=True)   # no graph break

Two ops are registered through `torch.library.custom_op`: the forward
(`plait::<name>`) and, when the algorithm has a gradient, the backward
(`plait::<name>_bwd`, the algorithm `plait.autodiff.grad` derives). Their fake
(meta) implementations give each output the shape of its named axes, bound from
the inputs' shapes, and the dtype of the traced graph's output, so FakeTensor,
AOTAutograd and dynamic shapes work without running anything. `register_autograd`
wires the forward to the backward op; a backward where fewer inputs require grad runs
the gradient taken with respect to those alone (runtime/torch_op_grad.py). What the forward saves for the backward
(`save`) is chosen as in `to_torch`: the backward schedule's `save:` list, else
recompute. Compared with `to_torch` (an autograd.Function), these are dispatcher
ops: `torch.library.opcheck` tests them and torch.compile keeps them whole.

Arguments are checked (in eager mode) by autodiff.torch_bridge.bind_arguments, the
same checks `to_torch` makes; inside torch.compile the fake implementation checks
ranks and the shared axes instead. An eager call that one of the op's kept handles
matches (runtime/torch_op_eager.py) is not bound again, and where nothing needs torch's
dispatcher (no grad, no mode, transform, tracer or profiler) it runs that handle
directly, without the tens of microseconds of custom-op dispatch.
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError

from .torch_op_define import _define, _result_list, output_meta  # noqa: F401 (API)
from .torch_op_grad import Backwards, wire_autograd

_registered: dict[str, tuple] = {}     # qualified name -> (algo, options, wrapper)


def _bind_plain(algo, args, kwargs) -> list:
    """Arguments in signature order with defaults: what torch.compile traces (the eager
    path checks more, through bind_arguments)."""
    names = [p.name for p in algo.params]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    values = []
    for p in algo.params:
        if p.name in bound:
            values.append(bound[p.name])
        elif not p.is_tensor and p.default is not None:
            values.append(p.default)
        else:
            raise PlaitError(f"{algo.name}: missing argument {p.name!r}")
    return values


def torch_op(algo, name: str | None = None, wrt=None, schedule=None, grad_schedule=None,
             save=None):
    """Register `algo` as the torch op `name` (default `plait::<algo name>`), differentiable
    in `wrt` (default: every float tensor); returns a function of torch tensors calling it.

    The function returns what plait.run returns (a tensor, a tuple, or a dict for named
    outputs). `.op` is the forward op, `.backward_op` the backward one (None without a
    gradient), `.backwards` the backward ops per set of inputs differentiated (a
    Backwards, or None). Registering the same algorithm under the same name again returns
    the same function; another algorithm under a taken name is refused.
    """
    import torch

    from plait.autodiff.torch_bridge import _renamed, bind_arguments, default_save
    from plait.autodiff.transform import forward_with_saved, grad

    from .torch_op_eager import PlainCall

    qualname = name or f"plait::{algo.name.replace('.', '_')}"
    if "::" not in qualname:
        raise PlaitError(f"torch op name {qualname!r} needs a namespace: 'plait::{qualname}'")
    options = (schedule, grad_schedule, None if wrt is None else tuple(wrt),
               None if save is None else tuple(save))
    if qualname in _registered:
        old_algo, old_options, wrapper = _registered[qualname]
        if old_algo is algo and old_options == options:
            return wrapper
        raise PlaitError(f"torch op {qualname} is already registered for {old_algo.name}; "
                         "pass another name=")
    save = default_save(algo, wrt, grad_schedule, save)
    try:
        bwd = grad(algo, wrt, save=save)
    except PlaitError:
        if wrt is not None or save:
            raise
        bwd = None                    # no gradient: a forward-only op
    fwd = forward_with_saved(algo, save) if save and bwd is not None else algo
    fwd_schedule = _renamed(schedule, fwd.name) if fwd is not algo else schedule
    out_names = list(algo.graph().outputs)
    n_user, n_fwd = len(out_names), len(fwd.graph().outputs)
    op, handles = _define(qualname, fwd, fwd_schedule, n_fwd)
    grad_wrt = list(bwd.wrt) if bwd is not None else []
    backward_op = backs = None
    if bwd is not None:
        backs = Backwards(qualname, algo, list(fwd.graph().outputs), save, grad_schedule, bwd)
        backward_op = backs.full.op
        wire_autograd(op, backs, n_user)

    def is_tensor(v):
        return isinstance(v, torch.Tensor)

    plain = PlainCall(fwd, grad_wrt)
    single = n_fwd == 1 and out_names == ["out"]     # the handle's result is the answer

    def apply(*args, **kwargs):
        if torch.compiler.is_compiling():
            values = _bind_plain(algo, args, kwargs)
        else:
            values = plain.values(args, kwargs)
            if values is not None:    # a handle that matches has checked the arguments
                if not plain.needs_autograd(values):
                    outs = handles.try_call(values)       # no dispatcher: nothing needs it
                    if outs is not None:
                        return outs if single else \
                            _package(out_names, _result_list(outs, n_fwd)[:n_user])
                elif handles.find(handles.split(values)[0]) is not None and \
                        plain.grads_allowed(values):
                    return _package(out_names, _op_outputs(op, values, n_fwd)[:n_user])
            values = bind_arguments(algo, grad_wrt, args, kwargs, is_tensor)
        values = [v.contiguous() if is_tensor(v) else v for v in values]
        return _package(out_names, _op_outputs(op, values, n_fwd)[:n_user])

    apply.__name__ = algo.name.replace(".", "_")
    apply.__doc__ = f"{algo.name} as the torch op {qualname}."
    apply.op, apply.backward_op, apply.algorithm, apply.saved = op, backward_op, algo, save
    apply.handles, apply.plain, apply.backwards = handles, plain, backs
    apply.wrt = tuple(grad_wrt)
    _registered[qualname] = (algo, options, apply)
    return apply


def _op_outputs(op, values, n: int) -> list:
    outs = op(*values)
    return [outs] if n == 1 else list(outs)


def _package(names: list[str], outs: list):
    if names == ["out"]:
        return outs[0]
    if names == [f"out{i}" for i in range(len(names))]:
        return tuple(outs)
    return dict(zip(names, outs))
