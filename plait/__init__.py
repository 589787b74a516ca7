"""plait: tensor algorithms + schedules (+ derived gradients) compiled to GPU kernels.

`import plait` loads only the language; `plait.autodiff`, `plait.schedule`,
`plait.lowering`, `plait.runtime` and `plait.schedules` are imported on first
use (the lowering and the runtime cost a second; a script may never need them).
"""
import importlib

__version__ = "0.1.0"

from plait.dsl import PlaitError, Tensor, algorithm  # noqa: E402,F401
import plait.dsl as dsl  # noqa: E402,F401

_SUBPACKAGES = ("autodiff", "dsl", "lowering", "runtime", "schedule", "schedules")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        module = importlib.import_module(f"plait.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'plait' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBPACKAGES))


def run(algo, *args, **kwargs):
    """Compile (cached) and run `algo` on the arguments; see plait.runtime.api.run."""
    from plait.runtime.api import run as _run
    return _run(algo, *args, **kwargs)


def compile(algo, like, schedule=None, device: str = "auto", target: str | None = None,
            **scalars):
    """A compiled handle for arrays shaped like `like`; see plait.runtime.compiled.compile."""
    from plait.runtime.compiled import compile as _compile
    return _compile(algo, like, schedule=schedule, device=device, target=target, **scalars)


def torch_op(algo, name=None, wrt=None, schedule=None, grad_schedule=None, save=None):
    """`algo` registered as a torch custom op; see plait.runtime.torch_op.torch_op."""
    from plait.runtime.torch_op import torch_op as _torch_op
    return _torch_op(algo, name=name, wrt=wrt, schedule=schedule, grad_schedule=grad_schedule,
                     save=save)


__all__ = ["PlaitError", "Tensor", "algorithm", "compile", "dsl", "run", "torch_op"]
