"""Cutting the computed operands of rotate_half (and the tables of take) out into temporaries.

rotate_half moves values along an axis: element i of the result is (minus) element
i ± n/2 (or i ^ 1, interleaved) of its operand, which another thread of the block, or
another block, holds. A tensor in memory can be read at any index, so rotate_half of an
`input` lowers to a load that reads the remapped index (the tile program's load with
`rotate=(axis, 'half' | 'pairs')`). A computed operand (the backward's
`rotate_half(dout * sin)`) is written to a temporary by a kernel of its own first, and
the rotation loads that temporary.

The reshapes (split_axis, merge_axes, shift: dsl/reshape.py) are the same kind of read:
one of an input, or a chain of them down to an input, is a load at remapped indices;
one of a computed value reads it from a temporary (the simplest correct rule: the
producer's kernel writes it once, whatever positions the remapping reads).

The temporary holds the operand in its own dtype (bf16 for a bf16 algorithm), as the
contraction temporaries do; a schedule's `storage:` entry for the buffer may say fp32.
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError
from plait.dsl.node import Node, make_attrs, topo_order
from plait.dsl.reshape import RESHAPES

ROTATE = "rotate_half"
# Ops that read their first operand at remapped positions, and their temporaries' names:
# `take` reads a table row by row at indices, so a computed table is staged the same way.
MOVED = {ROTATE: "rot", "take": "table", **{op: "view" for op in RESHAPES}}


def _check_even(n: Node, sizes: dict[str, int]) -> None:
    axis = n.attr("axis")
    if axis in sizes and sizes[axis] % 2:
        raise PlaitError(f"rotate_half over {axis!r}: the axis has odd size {sizes[axis]}; "
                         "rotate_half needs an even one", n.loc)


def stage_rotations(name: str, staged: list[tuple[str, Node]], outputs: dict[str, Node],
                    sizes: dict[str, int]
                    ) -> tuple[list[tuple[str, Node]], dict[str, Node]]:
    """(the temporaries, in the order they are computed, now with one per computed
    rotate_half operand; the outputs reading them). `staged` are temporaries cut out
    earlier (contraction operands): a rotation's temporary goes just before the first
    of them that reads it, after those it reads. Odd sizes of a rotated axis raise."""
    memo: dict[int, Node] = {}
    temps: dict[int, Node] = {}          # operand uid -> the input reading its temporary
    done: list[tuple[str, Node]] = []

    def rewrite(value: Node) -> Node:
        for n in topo_order([value]):
            if n.uid in memo:
                continue
            ins = tuple(memo[i.uid] for i in n.inputs)
            if n.op in MOVED or n.op in RESHAPES:
                if n.op == ROTATE:
                    _check_even(n, sizes)
                # a reshape of a reshape of an input is one remapped load of the input
                view = n.op in RESHAPES and ins[0].op in RESHAPES
                if ins[0].op != "input" and not view:
                    if ins[0].uid not in temps:    # rotated twice, written once
                        buf = f"{name}.{MOVED[n.op]}{len(temps)}"
                        done.append((buf, ins[0]))
                        temps[ins[0].uid] = Node("input", (), ins[0].axes, ins[0].dtype,
                                                 make_attrs(name=buf), n.loc)
                    ins = (temps[ins[0].uid],) + ins[1:]
            memo[n.uid] = n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype,
                                                         n.attrs, n.loc)
        return memo[value.uid]

    for buf, value in staged:
        value = rewrite(value)
        done.append((buf, value))
    outputs = {k: rewrite(v) for k, v in outputs.items()}
    if not temps:
        return list(staged), outputs
    return done, outputs
