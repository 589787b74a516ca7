"""A language model's loss from token ids: an embedding lookup, the LM head and a
cross-entropy with integer labels, averaged over the tokens.

    h[n, d]      = table[ids[n], d]                       take along V (embedding)
    logits[n, v] = sum_d h[n, d] * head[v, d]            the LM head, a contraction over D
    loss         = mean_n (logsumexp_v logits[n, v] - logits[n, labels[n]])

The label's logit is a batched take: labels shares N with logits, so row n of logits is
read at labels[n]. The gradient is derived from this source (plait.autodiff.grad): the
head and the table get (softmax(logits) - onehot(labels)) / N through the contraction
and, for the table, a scatter_add of each token's row back to its id.
"""
from plait.dsl import Tensor, algorithm, logsumexp, mean, sum, take


@algorithm
def lm_loss(ids: Tensor["N", "int64"], labels: Tensor["N", "int64"],
            table: Tensor["V", "D"], head: Tensor["V", "D"]):
    h = take(table, ids, axis="V")                        # [N, D]
    logits = sum(h * head, over="D")                      # [N, V]
    nll = logsumexp(logits, over="V") - take(logits, labels, axis="V")
    return mean(nll, over="N")
