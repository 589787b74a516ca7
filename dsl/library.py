"""Composite functions written in the DSL itself (they trace to primitives)."""
from __future__ import annotations

import math

from .errors import PlaitError, user_location
from .ops import abs as abs_
from .ops import erf, exp, log, maximum, rsqrt, sigmoid, sqrt, stop_gradient, tanh, where
from .ops import max as max_
from .ops import sum as sum_
from .tensor import Tensor, broadcast, size


def mean(x: Tensor, over=None) -> Tensor:
    axes = (over,) if isinstance(over, str) else tuple(over or ())
    total = sum_(x, over=over)
    dtype = total.dtype if total.dtype.is_float else "fp32"
    count = size(axes[0], dtype) if axes else None
    for a in axes[1:]:
        count = count * size(a, dtype)
    if count is None:
        return total
    return total / count


def var(x: Tensor, over=None) -> Tensor:
    xc = x - mean(x, over=over)
    return mean(xc * xc, over=over)


def softmax(x: Tensor, over=None) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) over the axis (stable form).

    The max only shifts the exponent, so no gradient flows through it: marking it
    spares the derived backward two reductions and a comparison.
    """
    e = exp(x - stop_gradient(max_(x, over=over)))
    return e / sum_(e, over=over)


def logsumexp(x: Tensor, over=None) -> Tensor:
    """log(sum(exp(x))) over the axis, shifted by the max. A row whose max is infinite
    would shift by inf - inf = NaN: its log-sum-exp is that max (+inf for a row holding
    +inf, -inf for a row of -inf), as torch gives."""
    m = stop_gradient(max_(x, over=over))   # the shift carries no gradient (see softmax)
    lse = log(sum_(exp(x - m), over=over)) + m
    return where(abs_(m) == math.inf, m, lse)


def log_softmax(x: Tensor, over=None) -> Tensor:
    """(x - max) - log(sum(exp(x - max))), torch's form: a row holding +inf, or all -inf,
    is NaN throughout, as softmax's is (x - logsumexp(x) would give -inf beside the +inf)."""
    shifted = x - stop_gradient(max_(x, over=over))
    return shifted - log(sum_(exp(shifted), over=over))


def relu(x: Tensor) -> Tensor:
    return maximum(x, 0.0)


def silu(x: Tensor) -> Tensor:
    return x * sigmoid(x)


def gelu(x: Tensor) -> Tensor:
    """GELU, exact erf form."""
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU, tanh approximation."""
    return 0.5 * x * (1.0 + tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def power(x: Tensor, exponent) -> Tensor:
    """x ** exponent for a Python number exponent."""
    if isinstance(exponent, Tensor):
        return exp(log(x) * exponent)
    if not isinstance(exponent, (int, float)):
        raise PlaitError(f"x ** {exponent!r}: the exponent must be a number or tensor",
                         user_location())
    if exponent == 0.5:
        return sqrt(x)
    if exponent == -0.5:
        return rsqrt(x)
    if float(exponent).is_integer() and 0 < abs(exponent) <= 8:
        result = x
        for _ in range(int(abs(exponent)) - 1):
            result = result * x
        return result if exponent > 0 else 1.0 / result
    return exp(log(x) * float(exponent))


__all__ = ["mean", "var", "softmax", "logsumexp", "log_softmax", "relu", "silu", "gelu",
           "gelu_tanh", "power", "broadcast"]
