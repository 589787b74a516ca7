"""A Mamba-style selective scan: a linear recurrence along the sequence, per channel.

    h_t = exp(dt_t * A) * h_{t-1} + dt_t * B_t * x_t        (h_{-1} = 0)
    y_t = sum over the state axis N of C_t * h_t

The recurrence h_t = a_t * h_{t-1} + b_t is an associative scan of the pairs (a_t, b_t)
with (a1, b1) o (a2, b2) = (a1 * a2, a2 * b1 + b2) and identity (1, 0): the b part of the
running pair is h. `scan` runs it along L in one block per row (the other axes spread over
blocks), the exp and products fused into its loads and the sum over N into its stores.

`linear_recurrence` is the bare recurrence over [B, L, D] (the scan bench's shape);
`selective_scan` is Mamba's, with a state of N per channel: x, dt [B, L, D], A [D, N],
B and C [B, L, N].
"""
from plait.dsl import Tensor, algorithm, exp, scan
from plait.dsl import sum as total


def linear(left, right):
    """(a1, b1) o (a2, b2): first apply a1, b1, then a2, b2."""
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


@algorithm
def linear_recurrence(a: Tensor["B", "L", "D"], b: Tensor["B", "L", "D"]):
    """h_t = a_t * h_{t-1} + b_t along L, from h_{-1} = 0."""
    _, h = scan(linear, (1.0, 0.0), (a, b), over="L")
    return h


@algorithm
def selective_scan(x: Tensor["B", "L", "D"], dt: Tensor["B", "L", "D"], A: Tensor["D", "N"],
                   Bm: Tensor["B", "L", "N"], C: Tensor["B", "L", "N"]):
    _, h = scan(linear, (1.0, 0.0), (exp(dt * A), dt * Bm * x), over="L")
    return total(C * h, over="N")
