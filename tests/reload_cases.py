"""Algorithms over long rows that the reload tests share (CPU and GPU,
lowering/ir/simt_reload.py): a LayerNorm, whose centred row is used after both of its
reductions, and a softmax of a row masked by a bool tensor and shifted by an int one."""
from plait.dsl import Tensor, algorithm, mean, rsqrt, softmax, where


@algorithm
def norm(x: Tensor["M", "N"], w: Tensor["N"], b: Tensor["N"]):
    xc = x - mean(x, over="N")
    return xc * rsqrt(mean(xc * xc, over="N") + 1e-5) * w + b


@algorithm
def masked_probs(x: Tensor["M", "N"], keep: Tensor["M", "N", "bool"], bias: Tensor["N", "int32"]):
    return softmax(where(keep, x + bias, -1e4), over="N")
