"""Batched matrix product: one C[M, N] per batch index, the batch axis kept."""
from plait.dsl import Tensor, algorithm, sum


@algorithm
def bmm(a: Tensor["B", "M", "K"], b: Tensor["B", "K", "N"]):
    return sum(a * b, over="K")
