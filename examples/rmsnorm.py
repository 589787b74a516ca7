"""RMSNorm forward over the last axis; 1/rms is named so a backward schedule may save it."""
from plait.dsl import Tensor, algorithm, mean, name, rsqrt


@algorithm
def rmsnorm(x: Tensor["M", "N"], w: Tensor["N"], eps: float = 1e-6):
    return x * name(rsqrt(mean(x * x, over="N") + eps), "rstd") * w
