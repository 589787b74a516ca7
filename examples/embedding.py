"""Embedding lookup and a cross-entropy with integer labels, written with take.

`take(table, ids, axis="V")` reads row ids[n] of table[V, D]: ids' axes replace V in the
result. The ids argument is declared with its dtype (int64, as torch's index tensors
are) so that autodiff can trace the algorithm without arrays. The token axis comes first
in the signature, so the result is stored [N, D], as torch.nn.functional.embedding gives it.
"""
from plait.dsl import Tensor, algorithm, logsumexp, take


@algorithm
def embedding(ids: Tensor["N", "int64"], table: Tensor["V", "D"]):
    return take(table, ids, axis="V")


@algorithm
def scaled_embedding(ids: Tensor["N", "int64"], table: Tensor["V", "D"],
                     pos: Tensor["N", "D"], scale: float = 1.0):
    """A token embedding scaled (by sqrt(D) in the original Transformer) plus a
    positional embedding per token."""
    return take(table, ids, axis="V") * scale + pos


@algorithm
def cross_entropy(labels: Tensor["N", "int64"], logits: Tensor["N", "V"]):
    """Per-token loss: logsumexp of the row minus the logit of its label. labels shares N
    with logits, so row n of logits is read at labels[n] (a batched take)."""
    return logsumexp(logits, over="V") - take(logits, labels, axis="V")
