"""Top-k sampling of the next token: scale the logits by 1 / temperature, keep the k
largest, take a softmax over those k and draw one of them with a counter-based uniform.

    values, at = topk(logits / temperature, k, over="V", into="K")   sorted, largest first
    p          = softmax(values, over="K")
    u          = rand(seed, over=("B",))                              one uniform per row
    choice     = number of k whose running sum of p is <= u           (inverse CDF)
    token      = at[b, choice[b]]                                     an int32 vocabulary id
    p          = p[b, choice[b]]                                      its probability

The draw is a pure function of (seed, row): the float64 reference, the CPU executor and
the GPU pick the same token. k is fixed when the algorithm is traced (`sampler(k)` makes
one); a choice past the last k (u above the sum's rounding) is clamped to the last.
Rows of up to 4096 logits (a sort fits one block; dsl/sort.py).
"""
from plait.dsl import (Tensor, algorithm, cast, cumsum, minimum, rand, softmax, sum, take,
                       topk)


def sampler(k: int):
    @algorithm
    def topk_sample(logits: Tensor["B", "V"], seed: int = 0, temperature: float = 1.0):
        values, at = topk(logits / temperature, k, over="V", into="K")
        p = softmax(values, over="K")
        u = rand(seed, over=("B",))
        below = sum(cast(cumsum(p, over="K") <= u, "int32"), over="K")
        choice = minimum(below, k - 1)
        return {"token": take(at, choice, axis="K"), "p": take(p, choice, axis="K")}
    return topk_sample


top8 = sampler(8)
