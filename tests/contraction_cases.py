"""Contraction algorithms the CPU and GPU tiers share: every storage order, batch, epilogues."""
from plait.dsl import Tensor, algorithm, cast, sigmoid, sum


@algorithm
def mm_nt(a: Tensor["M", "K"], b: Tensor["N", "K"]):           # B stored transposed
    return sum(a * b, over="K")


@algorithm
def mm_tn(a: Tensor["K", "M"], b: Tensor["K", "N"]):           # A stored transposed
    return sum(a * b, over="K")


@algorithm
def mm_out_t(b: Tensor["K", "N"], a: Tensor["M", "K"]):        # the output is [N, M]
    return sum(a * b, over="K")


@algorithm
def mm_residual(a: Tensor["M", "K"], b: Tensor["K", "N"], c: Tensor["M", "N"],
                alpha: float = 0.5):
    return sum(a * b, over="K") * alpha + c


@algorithm
def mm_silu_rows(a: Tensor["M", "K"], b: Tensor["K", "N"], s: Tensor["M"]):
    y = sum(a * b, over="K") * s                                  # a per-row scale
    return cast(y * sigmoid(y), "bf16")
