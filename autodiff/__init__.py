"""Gradient algorithms derived from algorithm graphs (reverse mode, at the source level).

    from plait.autodiff import grad, to_source, check_grads
    bwd = grad(layernorm, wrt=["x", "w", "b"])   # an ordinary plait algorithm: layernorm.bwd
    print(to_source(bwd))                        # ... as plait DSL source
    check_grads(layernorm, {"x": x, "w": w, "b": b})
"""
from .check import GradientCheckError, check_grads
from .derived import DerivedAlgorithm
from .reverse import differentiate
from .simplify import RULES, simplify
from .source import from_source, to_source
from .transform import forward_with_saved, grad, vjp


def to_torch(algo, wrt=None, schedule=None, grad_schedule=None, save=None):
    """A torch-callable running algo forward and its gradient backward (see torch_bridge).
    Imported lazily: plait does not depend on torch."""
    from .torch_bridge import to_torch as _to_torch
    return _to_torch(algo, wrt=wrt, schedule=schedule, grad_schedule=grad_schedule, save=save)


__all__ = ["DerivedAlgorithm", "GradientCheckError", "RULES", "check_grads", "differentiate",
           "forward_with_saved", "from_source", "grad", "simplify", "to_source", "to_torch",
           "vjp"]
