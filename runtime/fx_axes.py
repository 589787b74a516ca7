"""Axis names for the dims of an FX region: torch broadcasts by position, plait by name.

Every dim of size > 1 of every value in the region is a slot; each op's rule (fx_ops)
says which slots are the same axis (an elementwise op's right-aligned dims of equal size,
a reduction's kept dims, a matmul's M, N and K, a transpose's permuted dims), and a
union-find joins them. Each class becomes one axis named from its extent ("a64", "a64b" for a
second axis of 64). Size-1 dims have no axis: the region squeezes them on the way in and
reshapes them back on the way out. A value whose two dims fall into one class (x + x.t()
for square x) cannot be written with named axes; the region is then refused.
"""
from __future__ import annotations

import string

from plait.dsl.errors import PlaitError


def shape(node) -> tuple[int, ...]:
    return tuple(node.meta["val"].shape)


def dims_of(node, dims) -> list[int]:
    """A dim argument (an int or a list, negative counting from the end) as sorted dims."""
    rank = len(shape(node))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(d % rank for d in dims)


def slice_range(node) -> tuple[int, int, int, int]:
    """(dim, start, stop, step) of a slice.Tensor node, start and stop clamped into the
    operand's size as torch clamps them."""
    src = node.args[0]
    args = list(node.args[1:]) + [None] * (5 - len(node.args))
    dim, start, stop, step = (node.kwargs.get(k, a) for k, a in
                              zip(("dim", "start", "end", "step"), args))
    dim = dims_of(src, 0 if dim is None else dim)[0]
    n = shape(src)[dim]

    def clamp(i, default):
        i = default if i is None else i
        i = i + n if i < 0 else i
        return min(max(i, 0), n)
    return dim, clamp(start, 0), clamp(stop, n), 1 if step is None else step


def cat_dim(node) -> int:
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    return dims_of(node, dim)[0]


class AxisNames:
    """The axis of each (node, dim) slot of a region, from the ops' rules."""

    def __init__(self, nodes, table):
        self._parent: dict = {}
        self._holders: dict = {}        # class root -> the nodes with a dim in that class
        self.renames: dict = {}         # node -> [(operand, dim, slot it is renamed to)]
        self._nodes = list(nodes)
        for node in self._nodes:
            for d, n in enumerate(shape(node)):
                if n != 1:
                    self._parent[(node, d)] = (node, d)
                    self._holders[(node, d)] = {node}
        for node in self._nodes:
            if node.op == "call_function":
                self._current = node
                getattr(self, "_rule_" + table[node.target].rule)(node)
        self._names = self._assign()
        for node in self._nodes:
            axes = [a for a in self.axes(node) if a is not None]
            if len(set(axes)) != len(axes):
                raise PlaitError(f"{node.name}: two of its dims {list(shape(node))} are one "
                                 "axis by broadcasting, which named axes cannot express")

    # ---------------------------------------------------------------- union-find

    def _find(self, slot):
        while self._parent[slot] != slot:
            self._parent[slot] = self._parent[self._parent[slot]]
            slot = self._parent[slot]
        return slot

    def _join(self, a, da, b, db):
        """(a, da) and (b, db) are one axis; b is the current node's operand. Where one
        node already has a dim in each class (self-attention's q @ k^T: both positions
        come from the same T), joining would give it one axis twice: b's dim is then
        renamed to a's axis when the current node is written (fx_region, a full-range
        slice: no copy)."""
        if (a, da) in self._parent and (b, db) in self._parent:
            ra, rb = self._find((a, da)), self._find((b, db))
            if ra == rb:
                return
            if self._holders[ra] & self._holders[rb]:
                self.renames.setdefault(self._current, []).append((b, db, (a, da)))
                return
            self._parent[rb] = ra
            self._holders[ra] |= self._holders.pop(rb)

    def _assign(self) -> dict:
        names, used = {}, {}
        for slot in self._parent:
            root = self._find(slot)
            if root not in names:
                n = shape(root[0])[root[1]]
                k = used.get(n, 0)
                used[n] = k + 1
                names[root] = f"a{n}" + (_suffix(k) if k else "")
        return names

    # ---------------------------------------------------------------- queries

    def axis(self, node, dim: int) -> str | None:
        slot = (node, dim)
        return self._names[self._find(slot)] if slot in self._parent else None

    def axes(self, node) -> list[str | None]:
        """One entry per dim of node: its axis, None for a size-1 dim."""
        return [self.axis(node, d) for d in range(len(shape(node)))]

    def out_axes(self, node) -> tuple[str, ...]:
        return tuple(a for a in self.axes(node) if a is not None)

    def extent(self, axis: str) -> int:
        for (node, d) in self._parent:
            if self.axis(node, d) == axis:
                return shape(node)[d]
        raise KeyError(axis)

    def reduced_axes(self, node) -> tuple[str, ...]:
        src = node.args[0]
        return tuple(a for a in (self.axis(src, d) for d in dims_of(src, node.args[1]))
                     if a is not None)

    def contracted_axis(self, node) -> str | None:
        a = node.args[-2]
        return self.axis(a, len(shape(a)) - 1)

    # ---------------------------------------------------------------- rules

    def _aligned(self, node, src) -> None:
        out, s = shape(node), shape(src)
        for i, n in enumerate(s):
            j = len(out) - len(s) + i
            if n == out[j]:
                self._join(node, j, src, i)

    def _rule_ew(self, node) -> None:
        for a in node.args:
            if hasattr(a, "meta") and "val" in a.meta:
                self._aligned(node, a)

    _rule_expand = _rule_ew

    def _rule_reduce(self, node) -> None:
        src = node.args[0]
        reduced = dims_of(src, node.args[1])
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        kept = [d for d in range(len(shape(src))) if d not in reduced]
        for j, d in enumerate(kept):
            self._join(node, d if keepdim else j, src, d)

    def _rule_mm(self, node) -> None:
        a, b = node.args[-2], node.args[-1]
        r = len(shape(a))
        for d in range(r - 2):                 # bmm's batch dim
            self._join(node, d, a, d)
            self._join(node, d, b, d)
        self._join(node, r - 2, a, r - 2)
        self._join(node, r - 1, b, r - 1)
        self._join(a, r - 1, b, r - 2)

    _rule_bmm = _rule_mm

    def _rule_addmm(self, node) -> None:
        self._rule_mm(node)
        self._aligned(node, node.args[0])

    def _rule_permute(self, node) -> None:
        src = node.args[0]
        r = len(shape(src))
        if node.target.__name__.startswith("t.") or node.target.__name__ == "t":
            perm = list(range(r))[::-1]
        elif len(node.args) == 3:                              # transpose(x, d0, d1)
            d0, d1 = node.args[1] % r, node.args[2] % r
            perm = list(range(r))
            perm[d0], perm[d1] = perm[d1], perm[d0]
        else:
            perm = [d % r for d in node.args[1]]
        for j, d in enumerate(perm):
            self._join(node, j, src, d)

    def _same_rank(self, node, src, dim: int) -> None:
        """Every dim but `dim` is src's; `dim` too where its size did not change."""
        for d, n in enumerate(shape(node)):
            if d != dim or n == shape(src)[d]:
                self._join(node, d, src, d)

    def _rule_slice(self, node) -> None:
        self._same_rank(node, node.args[0], slice_range(node)[0])

    def _rule_slice_backward(self, node) -> None:
        self._same_rank(node, node.args[0], node.args[2] % len(shape(node)))

    def _rule_cat(self, node) -> None:
        tensors, dim = node.args[0], cat_dim(node)
        for t in tensors:
            self._same_rank(node, t, dim if len(tensors) > 1 else -1)

    def _rule_embedding(self, node) -> None:
        """weight[V, D] read at idx[...]: the result is [..., D]."""
        weight, idx = node.args[0], node.args[1]
        for d in range(len(shape(idx))):
            self._join(node, d, idx, d)
        self._join(node, len(shape(idx)), weight, 1)

    def _rule_view(self, node) -> None:
        """A kept dim is its source's axis; a merged or split dim is an axis of its own
        (fx_ops writes merge_axes / split_axis between them)."""
        src = node.args[0]
        for ins, outs in view_groups(shape(src), shape(node)) or ():
            if len(ins) == 1 and len(outs) == 1:
                self._join(node, outs[0], src, ins[0])


def view_groups(src, out) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """How a reshape from `src` to `out` (torch's row-major order) maps dims larger than 1:
    a list of (source dims, result dims), each group one dim to one (kept), several to one
    (merged) or one to several (split). None where a group is several to several
    ([6, 4] -> [4, 6], [6, 4] -> [2, 12]). Symbolic sizes group where their products
    are known equal without a guard ([2, s0, 16] -> [2*s0, 16])."""
    ins = [d for d, n in enumerate(src) if n != 1]
    outs = [d for d, n in enumerate(out) if n != 1]
    groups, i, j = [], 0, 0
    while i < len(ins) and j < len(outs):
        gi, gj = [ins[i]], [outs[j]]
        a, b = src[ins[i]], out[outs[j]]
        i, j = i + 1, j + 1
        while not _known_equal(a, b):
            if i < len(ins) and _divides(a, b):
                gi.append(ins[i])
                a, i = a * src[ins[i]], i + 1
            elif j < len(outs) and _divides(b, a):
                gj.append(outs[j])
                b, j = b * out[outs[j]], j + 1
            else:
                return None
        if len(gi) > 1 and len(gj) > 1:
            return None
        groups.append((tuple(gi), tuple(gj)))
    return groups if i == len(ins) and j == len(outs) else None


def _divides(a, b) -> bool:
    """a is a proper part of b (a < b and a divides it), known without a guard."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b and b % a == 0
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return bool(statically_known_true(b % a == 0)) and not _known_equal(a, b)


def _known_equal(a, b) -> bool:
    """Two sizes known equal without adding a guard (a symbolic size is never 1)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    return bool(statically_known_true(a == b))


def _suffix(k: int) -> str:
    letters = string.ascii_lowercase
    out = ""
    while k:
        k, r = divmod(k, 26)
        out = letters[r] + out
    return out
