"""GeGLU gate: gelu(g) * u with the exact (erf) GELU."""
from plait.dsl import Tensor, algorithm, gelu


@algorithm
def geglu(g: Tensor["M", "N"], u: Tensor["M", "N"]):
    return gelu(g) * u
