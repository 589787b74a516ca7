"""A linear layer with its activation fused: gelu(A @ B + bias), one kernel."""
from plait.dsl import Tensor, algorithm, gelu, sum


@algorithm
def matmul_bias_gelu(a: Tensor["M", "K"], b: Tensor["K", "N"], bias: Tensor["N"]):
    return gelu(sum(a * b, over="K") + bias)
