"""Stage 3 for a contraction on tensor cores: the sum of products as a loop over K tiles.

A contraction kernel's tile program says `sum(a * b, over=K)` and then its epilogue. Once
the GEMM plan has fixed the K tile, the same program is written in the loop form the
streamed kernels use (`tile_stream.py`): a loop over K carrying the accumulator, a `dot`
of the two operand tiles in their storage dtypes, and the epilogue as plain ops after it:

    %z = const 0.0
    %l = loop axis=K step=64 carry=(%z)          [split=(KS, 2048): one range of K each]
      %c = carried loop=%l index=0
      %a = load a stream=K    %b = load b stream=K
      %d = dot %a %b %c over=K
      %y = yield %d loop=%l
    %r = result loop=%l index=0
    %s = mul %r %alpha                            scalar factors of the operands, moved out
    %t = round %s round=bf16                      the sum's own rounding, if the policy has one
    ... the epilogue ops, reading %t where they read the sum ...
    store out

The CPU executor of loop programs (`cpu/stream_emulate.py`) runs it; the GEMM emitters
read its epilogue from the ops after the loop.
"""
from __future__ import annotations

from plait.dsl.dtypes import DType

from .tile import TileOp, TileProgram


def contraction_program(tile: TileProgram, total: TileOp, loads: tuple[TileOp, TileOp],
                        chain: frozenset[int], factors: tuple[int, ...], tile_k: int,
                        split: tuple[str, int] | None = None) -> TileProgram:
    """`tile` with its sum `total` (of the product of `loads`, through the ops of `chain`,
    times the scalar values `factors`) rewritten as a loop over K in steps of `tile_k`;
    `split`: (axis, elements of K per index) when each output index sums one range."""
    k = total.attr("axis")
    ops: list[TileOp] = []
    new: dict[int, int] = {}

    def emit(op: str, args, axes, dtype: DType, **attrs) -> int:
        ops.append(TileOp(len(ops), op, tuple(args), tuple(axes), dtype,
                          tuple(sorted((a, v) for a, v in attrs.items() if v is not None))))
        return len(ops) - 1

    for op in tile.ops:
        if op.id in chain:
            continue
        if op.id != total.id:
            new[op.id] = emit(op.op, (new[a] for a in op.args), op.axes, op.dtype,
                              **dict(op.attrs))
            continue
        f32 = DType.FP32
        zero = emit("const", (), (), f32, value=0.0)
        loop = emit("loop", (zero,), (), f32, axis=k, step=tile_k, split=split)
        acc = emit("carried", (), total.axes, f32, loop=loop, index=0)
        a, b = (emit("load", (), x.axes, x.dtype, buffer=x.attr("buffer"), stream=k)
                for x in loads)
        emit("yield", (emit("dot", (a, b, acc), total.axes, f32, over=k),), (), f32,
             loop=loop)
        value = emit("result", (), total.axes, f32, loop=loop, index=0)
        for f in factors:
            value = emit("mul", (value, new[f]), total.axes, f32)
        if total.attr("round") is not None:
            value = emit("round", (value,), total.axes, f32, round=total.attr("round"))
        new[op.id] = value
    # A split loop's axis is the output's and not the sum's: each index along it holds
    # one range's partial sum, so the program runs over it too.
    axes = tile.axes + ((split[0],) if split and split[0] not in tile.axes else ())
    return TileProgram(tile.name, axes, tile.grid, tile.buffers, tile.scalars, tuple(ops))

