"""fp8 matrix product with per-tensor scales, written out in bf16. B is stored [N, K]
(K innermost), as fp8 tensor cores read both operands. The operands are declared
e4m3, so `plait run` tests what the name says."""
from plait.dsl import Tensor, algorithm, cast, sum


@algorithm
def matmul_fp8(a: Tensor["M", "K", "fp8_e4m3"], b: Tensor["N", "K", "fp8_e4m3"],
               scale_a: float = 1.0, scale_b: float = 1.0):
    return cast(sum(a * b, over="K") * (scale_a * scale_b), "bf16")
