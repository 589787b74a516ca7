"""RMSNorm forward over the last axis."""
from plait.dsl import Tensor, algorithm, mean, rsqrt


@algorithm
def rmsnorm(x: Tensor["M", "N"], w: Tensor["N"], eps: float = 1e-6):
    return x * rsqrt(mean(x * x, over="N") + eps) * w
