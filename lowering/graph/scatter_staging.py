"""Giving each scatter_add a zeroed fp32 buffer of its own, which its kernel adds into.

scatter_add(src, idx, axis="V") adds every element of src at row idx along V: rows that
repeat an index add into one element, from any thread of any block. Its kernel walks
src's axes and adds with fp32 atomics (`red.global.add.f32`) into a buffer the runtime
zero-fills; the add of an element whose index is outside [0, size of V) is dropped.

Where the scatter is an output by itself (a gradient `dtable`, perhaps permuted into the
table's storage order) and stored as fp32, its kernel adds straight into the output,
which is then allocated zeroed. Otherwise its result goes to a temporary
`<algorithm>.scatter<k>` that the nodes reading it load (cast back to the scatter's dtype:
a bf16 gradient is summed in fp32 and rounded once, when stored).
"""
from __future__ import annotations

from plait.dsl.dtypes import DType
from plait.dsl.node import Node, make_attrs, topo_order

SCATTER = "scatter_add"


def _direct(outputs: dict[str, Node], storage_of) -> dict[str, Node]:
    """Outputs that are a scatter (or a permute of one) nothing else reads, stored fp32."""
    uses: dict[int, int] = {}
    for v in outputs.values():
        uses[v.uid] = uses.get(v.uid, 0) + 1
        for n in topo_order([v]):
            for i in n.inputs:
                uses[i.uid] = uses.get(i.uid, 0) + 1
    found = {}
    for out, v in outputs.items():
        s = v.inputs[0] if v.op == "permute" else v
        if s.op == SCATTER and uses[s.uid] == 1 and uses[v.uid] == 1 and \
                storage_of(out, v.dtype) == DType.FP32:
            found[out] = s
    return found


def stage_scatters(name: str, staged: list[tuple[str, Node]], outputs: dict[str, Node],
                   storage_of) -> tuple[list[tuple[str, Node]], dict[str, Node], set[str]]:
    """(the temporaries in the order they are computed, each scatter's just before its
    readers; the outputs; the names of the buffers scatters add into, to be zeroed)."""
    direct = _direct(outputs, storage_of)
    zeroed = set(direct)
    keep = {s.uid for s in direct.values()}
    memo: dict[int, Node] = {}
    done: list[tuple[str, Node]] = []

    def rewrite(value: Node) -> Node:
        for n in topo_order([value]):
            if n.uid in memo:
                continue
            ins = tuple(memo[i.uid] for i in n.inputs)
            n2 = n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs, n.loc)
            if n.op == SCATTER and n.uid not in keep:
                buf = f"{name}.scatter{len(zeroed) - len(direct)}"
                zeroed.add(buf)
                done.append((buf, Node(n.op, ins, n.axes, DType.FP32, n.attrs, n.loc)))
                n2 = Node("input", (), n.axes, DType.FP32, make_attrs(name=buf), n.loc)
                if n.dtype != DType.FP32:
                    n2 = Node("cast", (n2,), n.axes, n.dtype, (), n.loc)
            memo[n.uid] = n2
        return memo[value.uid]

    for buf, value in staged:
        value = rewrite(value)
        done.append((buf, value))
    outputs = {k: rewrite(v) for k, v in outputs.items()}
    return done, outputs, zeroed
