"""Row softmax, written as plain math (max-subtracted for stability)."""
from plait.dsl import Tensor, algorithm, exp, max, sum


@algorithm
def softmax(x: Tensor["M", "N"]):
    e = exp(x - max(x, over="N"))
    return e / sum(e, over="N")
