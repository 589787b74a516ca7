"""Algorithms the autodiff tests differentiate, with input makers (odd shapes on purpose)."""
from __future__ import annotations

import numpy as np

from plait.dsl import (Tensor, abs, algorithm, cos, erf, exp, exp2, gelu, gelu_tanh, log, log2,
                       log_softmax, logsumexp, max, maximum, mean, min, minimum, name, rsqrt,
                       sigmoid, silu, sin, softmax, sqrt, stop_gradient, sum, tanh, var,
                       where)

M, N = 7, 13


# The extreme of a computed value, whose rounding broke the tie mask (issue 31).
@algorithm
def col_max(x: Tensor["M", "N"]):
    return max(x * 1.3, over="M")


@algorithm
def col_min(x: Tensor["M", "N"]):
    return min(x * 1.3, over="M")



@algorithm
def layernorm(x: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"], eps: float = 1e-5):
    mu = mean(x, over="N")
    xc = x - mu
    v = mean(xc * xc, over="N")
    return xc * rsqrt(v + eps) * w + b


@algorithm
def layernorm_named(x: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"], eps: float = 1e-5):
    mu = name(mean(x, over="N"), "mu")
    xc = x - mu
    rstd = name(rsqrt(mean(xc * xc, over="N") + eps), "rstd")
    return xc * rstd * w + b


@algorithm
def rmsnorm(x: Tensor["M", "N"], w: Tensor["N"], eps: float = 1e-6):
    return x * rsqrt(mean(x * x, over="N") + eps) * w


@algorithm
def softmax_rows(x: Tensor["M", "N"]):
    return softmax(x, over="N")


@algorithm
def softmax_stable(x: Tensor["M", "N"]):
    """softmax with the max shift outside differentiation (the result does not depend on it)."""
    e = exp(x - stop_gradient(max(x, over="N")))
    return e / sum(e, over="N")


@algorithm
def lse_stable(x: Tensor["M", "N"]):
    m = stop_gradient(max(x, over="N"))
    return log(sum(exp(x - m), over="N")) + m


@algorithm
def swiglu(g: Tensor["M", "N"], u: Tensor["M", "N"]):
    return silu(g) * u


@algorithm
def geglu(g: Tensor["M", "N"], u: Tensor["M", "N"]):
    return gelu(g) * u


@algorithm
def geglu_tanh(g: Tensor["M", "N"], u: Tensor["M", "N"]):
    return gelu_tanh(g) * u


@algorithm
def lse(x: Tensor["M", "N"]):
    return logsumexp(x, over="N")


@algorithm
def log_softmax_rows(x: Tensor["M", "N"]):
    return log_softmax(x, over="N")


@algorithm
def row_max_min(x: Tensor["M", "N"]):
    return {"hi": max(x, over="N"), "lo": min(x, over="M")}


@algorithm
def clipped(x: Tensor["M", "N"], y: Tensor["M", "N"]):
    return where(x > y, x * y, x - 2.0 * y) + maximum(x, 0.0) + minimum(y, x)


@algorithm
def division(x: Tensor["M", "N"], y: Tensor["M", "N"]):
    return x / y + 1.0 / (y * y)


@algorithm
def unaries(x: Tensor["M", "N"]):
    return (exp(x) + tanh(x) + sigmoid(x) + erf(x) + sin(x) * cos(x) + exp2(x)
            + abs(x) * 0.5)


@algorithm
def positive_unaries(p: Tensor["M", "N"]):
    return log(p) + sqrt(p) + rsqrt(p) + log2(p) + p ** 3 + p ** -0.5


@algorithm
def broadcast_bias(x: Tensor["M", "N"], w: Tensor["N"], c: Tensor["M"]):
    return x * w + c - w * c


@algorithm
def column_sum(x: Tensor["M", "N"], w: Tensor["N"]):
    return sum(x * x, over="M") * w


@algorithm
def variance(x: Tensor["M", "N"]):
    return var(x, over="N")


@algorithm
def scalar_loss(x: Tensor["M", "N"], t: Tensor["M", "N"], scale: float = 0.5):
    d = x - t
    return sum(sum(d * d, over="N"), over="M") * scale


@algorithm
def two_outputs(x: Tensor["M", "N"], w: Tensor["N"]):
    h = tanh(x * w)
    return {"h": h, "s": sum(h, over="N")}


@algorithm
def unused_input(x: Tensor["M", "N"], w: Tensor["N"]):
    return exp(x)


def positive(shape, rng):
    return np.abs(rng.standard_normal(shape)) + 0.5


def inputs_for(algo, rng) -> dict:
    """Fresh random inputs for one of the algorithms above."""
    sizes = {"M": M, "N": N}
    out = {}
    for p in algo.params:
        if not p.is_tensor:
            continue
        shape = tuple(sizes[a] for a in p.axes)
        wants_positive = algo is positive_unaries or (algo is division and p.name == "y")
        out[p.name] = positive(shape, rng) if wants_positive else rng.standard_normal(shape)
    return out


CASES = [layernorm, layernorm_named, rmsnorm, softmax_rows, softmax_stable, lse_stable, swiglu,
         geglu, geglu_tanh, lse, log_softmax_rows, row_max_min, clipped, division, unaries,
         positive_unaries, broadcast_bias, column_sum, variance, scalar_loss, two_outputs,
         unused_input]
