"""LayerNorm forward over the last axis. The row mean and 1/std carry names, so that a
backward schedule may choose to save them (`save: [mu, rstd]`) instead of recomputing."""
from plait.dsl import Tensor, algorithm, mean, name, rsqrt


@algorithm
def layernorm(x: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"], eps: float = 1e-5):
    mu = name(mean(x, over="N"), "mu")
    xc = x - mu
    var = mean(xc * xc, over="N")
    return xc * name(rsqrt(var + eps), "rstd") * w + b
