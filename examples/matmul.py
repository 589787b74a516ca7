"""Matrix product as math: C[M, N] = sum over K of A[M, K] * B[K, N]. The lowering finds
the contraction and puts it on tensor cores; the storage order of each operand is the
order of its axes in the signature (B[N, K] is B stored transposed)."""
from plait.dsl import Tensor, algorithm, sum


@algorithm
def matmul(a: Tensor["M", "K"], b: Tensor["K", "N"]):
    return sum(a * b, over="K")
