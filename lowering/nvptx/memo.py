"""A per-emitter memo for emitter methods that must return one LLVM value per argument set.

`functools.cache` on a method keys on `self` in a cache owned by the function, so every
emitter, with its whole LLVM module, stays alive for the life of the process (a leak of
hundreds of KB per compiled kernel). This memo is stored on the emitter and dies with it.
"""
from __future__ import annotations

import functools


def per_emitter(method):
    """Like `functools.cache` (same keys: the arguments as passed), but held by `self`."""
    slot = "_memo_" + method.__name__

    @functools.wraps(method)
    def cached(self, *args, **kwargs):
        memo = self.__dict__.setdefault(slot, {})
        key = (args, tuple(kwargs.items()))
        if key not in memo:
            memo[key] = method(self, *args, **kwargs)
        return memo[key]
    return cached
