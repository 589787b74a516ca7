"""Causal row softmax: column n of row m is seen only when n <= m (attention's scores with
queries along M and keys along N). The mask is math on index(), and -inf behaves as in
IEEE arithmetic, so masked positions get exactly 0, and 0 gradient."""
from plait.dsl import Tensor, algorithm, exp, index, max, sum, where


@algorithm
def causal_softmax(x: Tensor["M", "N"]):
    masked = where(index("N") <= index("M"), x, float("-inf"))
    e = exp(masked - max(masked, over="N"))
    return e / sum(e, over="N")
