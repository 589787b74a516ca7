"""Philox4x32-10 as the CPU executor runs it: numpy uint32 words only.

The reference (`plait.dsl.counter_rng.philox4x32`) forms each 64-bit product in uint64;
this one builds the high and low words of a 32x32-bit product from 16-bit halves, the
way a 32-bit machine does, so the two implementations share no arithmetic and a slip in
either shows up against the other and against Random123's known-answer vectors
(tests/dsl/test_random.py). The GPU's rule is lowering/nvptx/philox.py.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.counter_rng import KEY_STEPS, MULTIPLIERS, ROUNDS

U32 = np.uint32
_LOW16 = U32(0xFFFF)
_SIXTEEN = U32(16)


def mulhilo(a: int, x):
    """(high, low) words of the 64-bit product a * x, a a 32-bit constant, x uint32."""
    a_hi, a_lo = U32(a >> 16), U32(a & 0xFFFF)
    x_hi, x_lo = x >> _SIXTEEN, x & _LOW16
    lo_lo, hi_lo = a_lo * x_lo, a_hi * x_lo          # each < 2**32: exact
    lo_hi, hi_hi = a_lo * x_hi, a_hi * x_hi
    # The middle column: carries out of bit 32 are counted by the 16-bit halves.
    middle = (lo_lo >> _SIXTEEN) + (hi_lo & _LOW16) + (lo_hi & _LOW16)   # < 3 * 2**16
    high = hi_hi + (hi_lo >> _SIXTEEN) + (lo_hi >> _SIXTEEN) + (middle >> _SIXTEEN)
    low = (middle << _SIXTEEN) | (lo_lo & _LOW16)
    return high, low


def philox4x32(counter, key, rounds: int = ROUNDS):
    """Philox4x32 on uint32 arrays: counter (c0, c1, c2, c3), key (k0, k1) -> 4 words."""
    c = [np.asarray(w).astype(U32) for w in counter]
    k0, k1 = (np.asarray(w).astype(U32) for w in key)
    with np.errstate(over="ignore"):                 # uint32 wraps, as Philox means it
        for r in range(rounds):
            if r:
                k0, k1 = k0 + U32(KEY_STEPS[0]), k1 + U32(KEY_STEPS[1])
            hi0, lo0 = mulhilo(MULTIPLIERS[0], c[0])
            hi1, lo1 = mulhilo(MULTIPLIERS[1], c[2])
            c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return tuple(c)


def philox_word0(counter, key):
    """The `philox` op: word 0 at counter (counter, 0, 0, 0), key (key, 0), on int32 bits."""
    counter = np.asarray(counter).astype(U32)
    key = np.broadcast_to(np.asarray(key).astype(U32), counter.shape)
    zero = np.zeros_like(counter)
    return philox4x32((counter, zero, zero, zero), (key, np.zeros_like(key)))[0].astype(np.int32)
