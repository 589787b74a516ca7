"""A gated MLP's up projection (LLaMA's SwiGLU feed-forward): silu(x . w1) * (x . w3).

Both products run on tensor cores: x . w1 is written to a temporary of [M, N] and the
second product's epilogue reads it (the kernel graph says so), where one kernel holding
both would need partial sums over K outside tensor cores."""
from plait.dsl import Tensor, algorithm, silu, sum


@algorithm
def gated_mlp(x: Tensor["M", "K"], w1: Tensor["N", "K"], w3: Tensor["N", "K"]):
    return silu(sum(x * w1, over="K")) * sum(x * w3, over="K")
