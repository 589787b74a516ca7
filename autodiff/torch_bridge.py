"""`to_torch`: a plait algorithm as a differentiable torch function.

    f = to_torch(layernorm)              # wrt: every float tensor argument
    y = f(x, w, b)                       # forward: plait.run(layernorm, ...)
    y.sum().backward()                   # backward: plait.run(layernorm.bwd, ...)

torch is imported only when `to_torch` is called. Arguments are checked before
anything runs, and refused with a PlaitError naming the argument: a non-tensor
where the algorithm declares a tensor, a tensor of the wrong rank or of a dtype
plait lacks, tensors on different devices (or on a device that is neither CUDA
nor CPU), and a tensor that requires grad while plait does not differentiate
with respect to it (not in `wrt`), since its gradient would silently be lost.
"""
from __future__ import annotations

from plait.dsl.algorithm import Algorithm, Param
from plait.dsl.dtypes import dtype_of
from plait.dsl.errors import PlaitError

from .reverse import grad_name
from .saving import LSE
from .transform import grad


def bind_arguments(algo: Algorithm, wrt, args, kwargs, is_tensor) -> list:
    """algo's arguments in signature order, checked as the module docstring says.

    Duck-typed on tensors (`dtype`, `device`, `requires_grad`, `ndim`) so that
    the checks themselves need no torch.
    """
    params = algo.params
    if len(args) > len(params):
        raise PlaitError(f"{algo.name} takes {len(params)} arguments, got {len(args)}")
    bound = dict(zip((p.name for p in params), args))
    for k, v in kwargs.items():
        if k not in {p.name for p in params}:
            raise PlaitError(f"{algo.name} has no argument {k!r}")
        if k in bound:
            raise PlaitError(f"{algo.name}: argument {k!r} given twice")
        bound[k] = v
    values, devices = [], {}
    for p in params:
        if p.name not in bound:
            if p.is_tensor or p.default is None:
                raise PlaitError(f"{algo.name}: missing argument {p.name!r}")
            values.append(p.default)
            continue
        v = bound[p.name]
        values.append(_check_tensor(algo, p, v, wrt, is_tensor) if p.is_tensor
                      else _check_scalar(algo, p, v, is_tensor))
        if p.is_tensor:
            devices[p.name] = v.device
    kinds = {str(d) for d in devices.values()}
    if len(kinds) > 1:
        listing = ", ".join(f"{k} on {d}" for k, d in devices.items())
        raise PlaitError(f"{algo.name}: all tensors must be on one device ({listing})")
    for name, d in devices.items():
        if getattr(d, "type", str(d).split(":")[0]) not in ("cuda", "cpu"):
            raise PlaitError(f"{algo.name}: {name} is on {d}; plait runs CUDA (or CPU) tensors")
    return values


def _check_tensor(algo, p: Param, v, wrt, is_tensor):
    declared = f'Tensor[{", ".join(repr(a) for a in p.axes)}]'
    if not is_tensor(v):
        raise PlaitError(f"{algo.name}: argument {p.name!r} is declared {declared}; pass a "
                         f"torch.Tensor, not {type(v).__name__}")
    if v.ndim != len(p.axes):
        raise PlaitError(f"{algo.name}: argument {p.name!r} is declared {declared} "
                         f"({len(p.axes)} axes) but has {v.ndim}")
    try:
        dtype = dtype_of(v.dtype)
    except ValueError:
        raise PlaitError(f"{algo.name}: argument {p.name!r} is {v.dtype}, which plait has "
                         "no dtype for (use bf16, fp16, fp32, fp8, int32/int64 or bool)") from None
    if getattr(v, "requires_grad", False):
        if not dtype.is_float:
            raise PlaitError(f"{algo.name}: argument {p.name!r} requires grad but is {dtype}; "
                             "only float arguments can be differentiated")
        if p.name not in wrt:
            raise PlaitError(f"{algo.name}: argument {p.name!r} requires grad, but this "
                             f"function differentiates only {', '.join(wrt) or 'nothing'}; "
                             "add it to wrt= or detach it")
    return v


def _check_scalar(algo, p: Param, v, is_tensor):
    if is_tensor(v):
        if v.ndim != 0 or getattr(v, "requires_grad", False):
            raise PlaitError(f"{algo.name}: argument {p.name!r} is a scalar; pass a Python "
                             "number (scalars are not differentiated here)")
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PlaitError(f"{algo.name}: argument {p.name!r} is a scalar; pass a Python "
                         f"number, not {type(v).__name__}")
    return v


def _outputs(result, names: list[str], what: str) -> list:
    """plait.run's result (one array, a tuple, or a dict) as a list in `names` order."""
    if isinstance(result, dict):
        missing = [n for n in names if n not in result]
        if missing:
            raise PlaitError(f"{what}: plait.run returned no {missing}")
        return [result[n] for n in names]
    if isinstance(result, (tuple, list)):
        if len(result) != len(names):
            raise PlaitError(f"{what}: plait.run returned {len(result)} outputs, expected "
                             f"{len(names)} ({', '.join(names)})")
        return list(result)
    if len(names) != 1:
        raise PlaitError(f"{what}: plait.run returned one output, expected {', '.join(names)}")
    return [result]


def saved_by_schedule(algo: Algorithm, grad_schedule=None, arch: str | None = None) -> tuple:
    """What the backward's schedule says the forward should save (`save:` in
    `<algo>.bwd.yaml`); nothing, i.e. recompute, when no schedule says otherwise."""
    from plait.schedule.model import Schedule
    if grad_schedule is None:
        from plait.runtime.api import DEFAULT_TARGET, gpu_target
        from plait.runtime.driver import gpu_available
        from plait.schedule.lookup import find_schedule
        arch = arch or (gpu_target() if gpu_available() else DEFAULT_TARGET)
        grad_schedule = find_schedule(f"{algo.name}.bwd", arch)
    elif not isinstance(grad_schedule, Schedule):
        from plait.schedule.loader import load_schedule
        grad_schedule = load_schedule(grad_schedule)
    if grad_schedule is None:
        return ()
    from plait.schedule.validate import check_save_names
    check_save_names(grad_schedule, algo.graph())   # a typo names its file:line, not later
    return tuple(grad_schedule.default.save)


def outputs_reread(algo: Algorithm, wrt=None) -> tuple:
    """What the forward has anyway and its backward would otherwise recompute: the
    outputs it reads (attention's row term sum(dout * out)), and the log-sum-exp of the
    forward's softmax where the backward reads the softmax ("lse", which a streamed
    attention forward writes from its running max and sum)."""
    from plait.dsl.errors import PlaitError
    outputs = tuple(algo.graph().outputs)
    offers = [outputs + (LSE,), outputs] if LSE not in outputs else [outputs]
    for save in offers:
        try:
            backward = grad(algo, wrt, save=save).graph()
        except PlaitError:
            continue              # no single softmax (then no gradient: said where it matters)
        used = {n.attr("name") for n in backward.nodes if n.op == "input"}
        return tuple(name for name in save if name in used)
    return ()


def default_save(algo: Algorithm, wrt, grad_schedule, save) -> tuple:
    """`save` as given; else the backward schedule's list and the outputs reread."""
    if save is not None:
        return tuple(save)
    save = saved_by_schedule(algo, grad_schedule)
    return save + tuple(n for n in outputs_reread(algo, wrt) if n not in save)


def _renamed(schedule, name: str):
    """The forward's schedule, for the forward that also writes the saved values."""
    import dataclasses

    from plait.schedule.model import Schedule
    if schedule is None or not isinstance(schedule, Schedule):
        return schedule
    return dataclasses.replace(schedule, algorithm=name)


def to_torch(algo: Algorithm, wrt=None, schedule=None, grad_schedule=None, save=None):
    """A function of torch tensors computing algo, differentiable with respect to `wrt`.

    The forward runs `plait.run(algo, ..., schedule=schedule)`, the backward
    `plait.run(grad(algo, wrt), ..., schedule=grad_schedule)`. What the forward
    saves for the backward (`save`, names given with `plait.dsl.name`) defaults to
    the backward schedule's `save:` list, and the outputs the backward reads; with
    none, the backward recomputes.
    """
    import torch  # only here: plait does not depend on torch

    import plait

    from .transform import forward_with_saved
    save = default_save(algo, wrt, grad_schedule, save)
    bwd = grad(algo, wrt, save=save)
    fwd = forward_with_saved(algo, save) if save else algo
    fwd_schedule = _renamed(schedule, fwd.name) if save else schedule
    wrt = list(bwd.wrt)
    out_names = list(algo.graph().outputs)
    fwd_names = list(fwd.graph().outputs)
    grad_names = list(bwd.graph().outputs)
    n_params = len(algo.params)

    def as_torch(x, like):
        if isinstance(x, torch.Tensor):
            return x
        if hasattr(x, "__dlpack__"):
            return torch.from_dlpack(x)
        return torch.as_tensor(x, device=like.device)

    class PlaitFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *values):
            like = next(v for v in values if isinstance(v, torch.Tensor))
            outs = _outputs(plait.run(fwd, *values, schedule=fwd_schedule), fwd_names,
                            fwd.name)
            outs = [as_torch(o, like) for o in outs]
            saved = [dict(zip(fwd_names, outs))[name] for name in save]   # an output too
            ctx.save_for_backward(*(v for v in values if isinstance(v, torch.Tensor)), *saved)
            ctx.n_saved = len(saved)
            ctx.scalars = [None if isinstance(v, torch.Tensor) else v for v in values]
            user = outs[:len(out_names)]
            return user[0] if len(user) == 1 else tuple(user)

        @staticmethod
        def backward(ctx, *cotangents):
            stored = list(ctx.saved_tensors)
            saved = stored[len(stored) - ctx.n_saved:] if ctx.n_saved else []
            tensors = iter(stored[:len(stored) - ctx.n_saved])
            values = [next(tensors) if s is None else s for s in ctx.scalars]
            cots = [c.contiguous() for c in cotangents]
            result = plait.run(bwd, *values, *cots, *saved, schedule=grad_schedule)
            grads = dict(zip(grad_names, _outputs(result, grad_names, bwd.name)))
            return tuple(as_torch(grads[grad_name(p.name)], values[i])
                         if grad_name(p.name) in grads else None
                         for i, p in enumerate(algo.params[:n_params]))

    def apply(*args, **kwargs):
        values = bind_arguments(algo, wrt, args, kwargs,
                                lambda v: isinstance(v, torch.Tensor))
        values = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in values]
        return PlaitFunction.apply(*values)

    apply.__name__ = algo.name.replace(".", "_")
    apply.__doc__ = f"{algo.name} through plait, differentiable in {', '.join(wrt)}."
    apply.algorithm, apply.grad_algorithm, apply.saved = algo, bwd, save
    return apply
