"""Saying so when a kernel graph falls off a cliff: temporaries far larger than what the
algorithm reads and writes (split-reduction partials of a fusion the tensor cores did not
take, a [M, V] logits buffer) are named, sized and explained, rather than allocated in
silence."""
from __future__ import annotations

from .kernel_plan import KernelGraph

# Temporaries past both figures are reported: this many bytes, and this many times the
# bytes of the algorithm's inputs and outputs.
LARGE_BYTES = 256 * 2**20
LARGE_RATIO = 4


def _bytes(buffers, sizes) -> int:
    total = 0
    for b in buffers:
        n = b.dtype.itemsize
        for a in b.axes:
            n *= sizes[a]
        total += n
    return total


def large_temporaries(kg: KernelGraph, sizes: dict[str, int]) -> str | None:
    """A sentence naming the temporaries, their size and why, or None when they are
    modest. `sizes`: every axis's extent, derived ones included."""
    temps = [b for b in kg.buffers if b.role == "temp"]
    used = _bytes([b for b in kg.buffers if b.role != "temp"], sizes)
    big = _bytes(temps, sizes)
    if big < LARGE_BYTES or big < LARGE_RATIO * used:
        return None
    names = ", ".join(f"{b.name} {b.dtype}[{','.join(b.axes)}]" for b in temps)
    why = [f"kernel {name} runs without tensor cores: {reason}" for name, reason in kg.generic]
    why += [f"output {name} is not streamed: {reason}" for name, reason in kg.unstreamed]
    on_cores = sum(1 for k in kg.kernels if k.contraction)
    if len(kg.contractions) > on_cores:
        why.append(f"{len(kg.contractions) - on_cores} of its {len(kg.contractions)} "
                   "contractions stay in generic kernels (a kernel on tensor cores holds one "
                   "contraction; a fusion of two is not built yet)")
    return (f"{kg.algorithm}: temporaries take {big / 2**30:.2f} GiB ({names}) where the "
            f"inputs and outputs take {used / 2**30:.2f} GiB" +
            ("; " + "; ".join(why) if why else ""))
