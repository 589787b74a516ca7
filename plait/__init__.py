"""plait: tensor algorithms + schedules (+ derived gradients) compiled to GPU kernels."""
__version__ = "0.1.0"

from plait.dsl import algorithm, Tensor, PlaitError  # noqa: E402,F401


def run(algo, *args, **kwargs):
    """Compile (cached) and run `algo` on the arguments; see plait.runtime.api.run."""
    from plait.runtime.api import run as _run
    return _run(algo, *args, **kwargs)
