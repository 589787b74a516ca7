"""Greedy decoding: the next token is the position of the largest logit over the
vocabulary, as torch.argmax(logits, dim=-1) picks it (the first on ties; a NaN logit
is taken, as torch takes it). The index is int32.

`max_with_index` gives the largest logit and its position together: in one kernel they
read the row once and share one exchange between warps, so the greedy token's
log-probability costs a logsumexp beside it.
"""
from plait.dsl import Tensor, algorithm, argmax, logsumexp, max_with_index


@algorithm
def greedy(logits: Tensor["B", "V"]):
    return argmax(logits, over="V")


@algorithm
def greedy_logprob(logits: Tensor["B", "V"]):
    """The greedy token and its log-probability log softmax(logits)[token]."""
    top, token = max_with_index(logits, over="V")
    return {"token": token, "logprob": top - logsumexp(logits, over="V")}
