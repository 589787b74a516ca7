"""LayerNorm forward over the last axis."""
from plait.dsl import Tensor, algorithm, mean, rsqrt


@algorithm
def layernorm(x: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"], eps: float = 1e-5):
    mu = mean(x, over="N")
    xc = x - mu
    var = mean(xc * xc, over="N")
    return xc * rsqrt(var + eps) * w + b
