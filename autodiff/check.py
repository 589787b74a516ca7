"""`check_grads`: the derived gradient against finite differences, in a random direction.

For a random cotangent u (one per output) and a random direction v (one per
differentiated input), reverse mode gives <grad_x <u, f(x)>, v>; central
differences of the forward reference give the same number as
(<u, f(x + eps v)> - <u, f(x - eps v)>) / (2 eps). Everything runs in the
float64 reference evaluator, so the tolerance can be tight. Each input is
checked in its own direction, so a failure names the input whose gradient is
wrong.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plait.dsl.algorithm import Algorithm
from plait.dsl.errors import PlaitError
from plait.dsl.reference import evaluate

from .reverse import grad_name
from .transform import forward_with_saved, vjp


class GradientCheckError(AssertionError):
    """The derived gradient disagrees with finite differences."""


@dataclass(frozen=True)
class Check:
    """One input's comparison: reverse mode vs central differences."""
    name: str
    derived: float
    numeric: float

    @property
    def error(self) -> float:
        return abs(self.derived - self.numeric)

    def ok(self, rtol: float, atol: float) -> bool:
        scale = max(abs(self.derived), abs(self.numeric))
        return bool(np.isfinite(self.derived) and np.isfinite(self.numeric)
                    and self.error <= atol + rtol * scale)

    def line(self) -> str:
        return (f"  {self.name}: <grad, v> = {self.derived:.10g}, finite differences = "
                f"{self.numeric:.10g}, |difference| = {self.error:.3g}")


def _as_input(value):
    """Float arrays in float64 (they get perturbed); integer arrays and scalars as given."""
    if isinstance(value, (int, float)):
        return value
    array = np.asarray(value)
    return array.astype(np.float64) if array.dtype.kind == "f" or \
        array.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2") else array


def _random_like(value, rng) -> np.ndarray:
    return rng.standard_normal(np.shape(value))


def check_grads(algo: Algorithm, inputs: dict, wrt=None, eps: float = 1e-6,
                rtol: float = 1e-5, atol: float = 1e-8, *, save=(), seed=None,
                grad_algo: Algorithm | None = None) -> dict[str, Check]:
    """Raise GradientCheckError unless algo's derived gradient matches finite differences.

    `inputs` maps argument names to numpy arrays / numbers (scalars may be left
    to their defaults). Returns the per-input checks when all pass. `grad_algo`
    checks a given gradient algorithm (e.g. one read back with from_source)
    instead of deriving one.
    """
    rng = np.random.default_rng(seed)
    inputs = {k: _as_input(v) for k, v in inputs.items()}
    bwd = grad_algo or vjp(algo, wrt, save)
    fwd = algo.graph()
    missing = [p.name for p in algo.params if p.name not in inputs and
               (p.is_tensor or p.default is None)]
    if missing:
        raise PlaitError(f"check_grads({algo.name}): missing inputs {missing}")
    outputs = evaluate(fwd, inputs)
    cotangents = {grad_name(k): _random_like(v, rng) for k, v in outputs.items()}

    def loss(values: dict) -> float:
        outs = evaluate(fwd, values)
        return float(sum(np.sum(cotangents[grad_name(k)] * v) for k, v in outs.items()))

    bwd_inputs = {**inputs, **cotangents}
    if bwd.save:
        saved = evaluate(forward_with_saved(algo, bwd.save).graph(), inputs)
        bwd_inputs.update({k: saved[k] for k in bwd.save})
    grads = evaluate(bwd.graph(), bwd_inputs)

    checks: dict[str, Check] = {}
    for name in bwd.wrt:
        base = inputs.get(name, next(p.default for p in algo.params if p.name == name))
        v = _random_like(base, rng)
        g = grads[grad_name(name)]
        if np.shape(g) != np.shape(base):
            raise GradientCheckError(f"{bwd.name}: d{name} has shape {np.shape(g)}, but "
                                     f"{name} has shape {np.shape(base)}")
        plus = {**inputs, name: base + eps * v}
        minus = {**inputs, name: base - eps * v}
        if not np.ndim(base):
            plus[name], minus[name] = float(plus[name]), float(minus[name])
        numeric = (loss(plus) - loss(minus)) / (2 * eps)
        checks[name] = Check(name, float(np.sum(g * v)), numeric)

    bad = [c for c in checks.values() if not c.ok(rtol, atol)]
    if bad:
        raise GradientCheckError(
            f"gradient of {algo.name} disagrees with central finite differences "
            f"(eps={eps}, rtol={rtol}, atol={atol}) for {', '.join(c.name for c in bad)}:\n"
            + "\n".join(c.line() for c in checks.values()))
    return checks
