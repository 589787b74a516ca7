"""Small algorithms the runtime tests bind arguments to."""
from plait.dsl import Tensor, algorithm, sum


@algorithm
def axpb(x: Tensor["M", "N"], b: Tensor["N"], a: float = 2.0):
    return x * a + b


@algorithm
def two_out(x: Tensor["M", "N"]):
    return x * 2.0, sum(x, over="N")


@algorithm
def named_out(x: Tensor["M", "N"]):
    return {"double": x * 2.0, "total": sum(x, over="N")}
