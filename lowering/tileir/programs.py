"""Stage 3 for a whole kernel graph: each kernel's tile program, by the builder of its kind
(a streamed softmax-weighted contraction, a kernel of streamed sums, or any other)."""
from __future__ import annotations

from ..graph.policy import ResolvedPolicy
from ..graph.streaming import Stream
from .tile import TileProgram, build_tile_programs
from .tile_stream import build_stream_program
from .tile_stream_sums import build_sums_program


def build_all_tile_programs(kg, policy: ResolvedPolicy) -> list[TileProgram]:
    """The tile programs in the kernel graph's order; the plain kernels are built together
    (`tile.build_tile_programs`)."""
    buffers = {b.name: b for b in kg.buffers}
    plain = iter(build_tile_programs(kg, policy, [p for p in kg.kernels if p.stream is None]))
    out = []
    for p in kg.kernels:
        if p.stream is None:
            out.append(next(plain))
        elif isinstance(p.stream, Stream):
            out.append(build_stream_program(p, buffers, policy))
        else:
            out.append(build_sums_program(p, buffers, policy))
    return out
