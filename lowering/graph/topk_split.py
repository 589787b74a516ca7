"""Top-k over a row longer than one block: two kernels (a rewrite of the algorithm graph,
made when sizes are bound, before kernels are cut).

A block keeps the best k of at most SORT_MAX_EXTENT elements (ir/sort_steps.py). A
longer axis N of x[M, N] becomes

    xs[M, C, L] = x padded to C * L (the pad the worst value: -inf largest, NaN smallest,
                  the int32 extreme) and split into chunks of L = SORT_MAX_EXTENT
    at[C, L]    = c * L + l                      each element's position in the row
    kernel 1:   topk(xs, k, over L, indices=at)  -> candidates [M, C, K1] and their
                positions (a block per chunk; temporaries, both written by one kernel)
    kernel 2:   topk(merge(C, K1 -> CK) of the candidates, k, over CK, indices=the
                merged positions) -> [M, K]      (a block per row)

Kernel 2's ties go by the positions in the whole row, so the result is torch.topk's
(sorted=True; dsl/topk.py): the best k of a row are among its chunks' best k. The pad
never reaches the result: it is no better than any element and sits at later positions,
and a row has at least k elements. Where C * k still exceeds a block, kernel 2 is split
the same way (its pads' positions GIVEN_SENTINEL - 1, past every real one).

The new axes' sizes follow from N's at run time too: `made` lists them for
Program.complete_sizes as (axis, sources, divisor, multiplier), size = ceil(product of
the sources' sizes / divisor) * multiplier.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.graph import AlgorithmGraph, rebuild
from plait.dsl.node import Node, make_attrs
from plait.dsl.sort import GIVEN_SENTINEL, SORT_MAX_EXTENT

CHUNK = SORT_MAX_EXTENT          # a chunk of the row per block in the first kernel


def worst(dtype: DType, descending: bool):
    """The pad: no better than any value (ties then go by position, the pad's last)."""
    if dtype.is_float:
        return float("-inf") if descending else float("nan")
    info = np.iinfo(np.int32)
    return int(info.min if descending else info.max)


class _Splitter:
    def __init__(self, graph: AlgorithmGraph, sizes: dict[str, int]):
        self.order = list(graph.axis_order)
        self.sizes = dict(sizes)
        self.made: list[tuple[str, tuple[str, ...], int, int]] = []
        self.done: dict[tuple, tuple[Node, Node]] = {}

    def new_axes(self, axis: str, k: int) -> tuple[str, ...]:
        """(P, C, L, K1, CK): the padded row, chunks, a chunk, its best, the candidates;
        placed after `axis` in the canonical order, so replacing it keeps nodes canonical."""
        n = 0
        while any(f"{axis}_{p}{n}" in self.order for p in "pclkq"):
            n += 1
        names = tuple(f"{axis}_{p}{n}" for p in "pclkq")
        at = self.order.index(axis) + 1
        self.order[at:at] = names
        p, c, l, k1, ck = names
        chunks = -(-self.sizes[axis] // CHUNK)
        for name, size, rule in ((p, chunks * CHUNK, ((axis,), CHUNK, CHUNK)),
                                 (c, chunks, ((axis,), CHUNK, 1)), (l, CHUNK, ((), 1, CHUNK)),
                                 (k1, k, ((), 1, k)), (ck, chunks * k, ((axis,), CHUNK, k))):
            self.sizes[name] = size
            self.made.append((name,) + rule)
        return names

    def split(self, n: Node, x: Node, given: Node | None, axis: str) -> tuple[Node, Node]:
        """(values, positions) of topk node n's selection of x along `axis`."""
        k, desc = n.attr("k"), bool(n.attr("descending"))
        if self.sizes[axis] >= GIVEN_SENTINEL - 1:
            raise PlaitError(f"topk over {axis} of extent {self.sizes[axis]}: rows of 2^30 "
                             "elements or more are not supported", n.loc)
        if k > CHUNK // 2:
            raise PlaitError(f"topk over {n.attr('axis')} of extent "
                             f"{self.sizes[n.attr('axis')]}: k = {k} of a row longer than "
                             f"one block ({SORT_MAX_EXTENT}) is supported up to "
                             f"{CHUNK // 2}", n.loc)
        p, c, l, k1, ck = self.new_axes(axis, k)

        def sub(axes, old, new):
            return tuple(a for d in axes for a in (new if d == old else (d,)))

        def chunked(v: Node, fill) -> Node:
            padded = Node("shift", (v,), sub(v.axes, axis, (p,)), v.dtype, make_attrs(
                axis=axis, into=p, start=0, fill=fill), n.loc)
            return Node("split_axis", (padded,), sub(padded.axes, p, (c, l)), v.dtype,
                        make_attrs(axis=p, into=(c, l), fixed=((l, CHUNK),)), n.loc)

        xs = chunked(x, worst(x.dtype, desc))
        if given is None:
            def i32(op, ins, axes, **attrs):
                return Node(op, ins, axes, DType.INT32, make_attrs(**attrs), n.loc)
            first = i32("mul", (i32("iota", (), (c,), axis=c),
                                i32("const", (), (), value=CHUNK)), (c,))
            at = i32("add", (first, i32("iota", (), (l,), axis=l)), (c, l))
        else:
            at = chunked(given, GIVEN_SENTINEL - 1)
        best = sub(xs.axes, l, (k1,))
        parts = [Node("topk", (xs, at), best, x.dtype if part == 0 else DType.INT32,
                      make_attrs(axis=l, into=k1, k=k, part=part,
                                 **({"descending": True} if desc else {})), n.loc)
                 for part in (0, 1)]
        flat = tuple(ck if a == c else a for a in best if a != k1)
        merged = [Node("merge_axes", (v,), flat, v.dtype, make_attrs(parts=(c, k1), into=ck),
                       n.loc) for v in parts]
        if self.sizes[ck] > SORT_MAX_EXTENT:
            return self.split(n, merged[0], merged[1], ck)
        return tuple(Node("topk", (merged[0], merged[1]), n.axes,
                          x.dtype if part == 0 else DType.INT32,
                          make_attrs(axis=ck, **{a: n.attr(a) for a in
                                                 ("into", "k", "descending")}, part=part),
                          n.loc) for part in (0, 1))

    def replace(self, n: Node, ins: tuple) -> Node | None:
        if n.op != "topk" or len(ins) != 1 or self.sizes[n.attr("axis")] <= SORT_MAX_EXTENT:
            return None
        key = (ins[0].uid, n.attr("axis"), n.attr("descending"), n.attr("k"))
        if key not in self.done:
            self.done[key] = self.split(n, ins[0], None, n.attr("axis"))
        return self.done[key][n.attr("part")]


def split_long_topk(graph: AlgorithmGraph, sizes: dict[str, int]
                    ) -> tuple[AlgorithmGraph, dict[str, int], tuple]:
    """(the graph with each topk over more than SORT_MAX_EXTENT elements in two kernels'
    form, the sizes with the new axes', the new axes' rules (`made`, above))."""
    if not any(n.op == "topk" and sizes[n.attr("axis")] > SORT_MAX_EXTENT
               for n in graph.nodes):
        return graph, sizes, ()
    s = _Splitter(graph, sizes)
    outputs = rebuild(graph.outputs, lambda n, ins: s.replace(n, ins) or (
        n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs, n.loc)))
    out = AlgorithmGraph(graph.name, graph.params, tuple(s.order), outputs)
    out.forward = graph.forward
    return out, s.sizes, tuple(s.made)
