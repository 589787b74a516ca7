"""SwiGLU gate: silu(g) * u, elementwise."""
from plait.dsl import Tensor, algorithm, sigmoid


@algorithm
def swiglu(g: Tensor["M", "N"], u: Tensor["M", "N"]):
    return g * sigmoid(g) * u
