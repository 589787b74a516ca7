"""Which key tiles a mask leaves whole, or empty: interval arithmetic in LLVM.

A streamed program's logits may end in where(cond, s, -inf) with cond a function of
positions and of integer inputs along one position axis (`mask=index`, tile_stream.py):
causal, sliding window, prefix, document ids per token. Over one tile (rows lo..hi, keys
lo..hi) each position is an interval, an input is the interval from its least to its
greatest element over the tile's span, and so is every integer op of cond (an int32 result
that may wrap is the whole int32 range: `interval_arith`); a comparison
of two intervals is true throughout, false throughout, or neither. The kernel then skips
a tile where cond is false throughout (nothing is loaded or computed: every score would
be -inf) and drops the mask's arithmetic where it is true throughout. Ops the arithmetic
does not know give "neither", which is always safe.
"""
from __future__ import annotations

from llvmlite import ir

from plait.dsl.dtypes import DType

from ..nvptx import ops as L
from ..nvptx.kernel import loop

_FALSE, _TRUE = ir.Constant(L.I1, 0), ir.Constant(L.I1, 1)
BOUNDED = (DType.INT32, DType.BOOL)     # inputs an interval bounds over a tile
_FLIP = {"le": "ge", "lt": "gt", "ge": "le", "gt": "lt", "eq": "eq", "ne": "ne"}


class TileMask:
    """`status(cond, box)` of one mask condition; `box` maps an axis to (lo, hi) i32."""

    def __init__(self, emitter, ops: dict):
        self.k = emitter
        self.ops = ops
        self.hoisted: dict[tuple, tuple] = {}   # (load id, level): its bounds, taken once
        self.level = None
        self.lanewise = False

    def status(self, cond_id: int, box: dict, counts: dict, level=None,
               lanewise: bool = False) -> tuple:
        """(i1 true throughout the tile, i1 false throughout). `counts` gives each box
        axis's span as a Python int (hi - lo + 1), what an input's interval loops over;
        `level` names which hoisted bounds apply (those taken over the same rows).
        Every lane of each warp must call this: an input's interval is a warp reduction,
        unless `lanewise`, where each lane has a box of its own and reads its inputs'
        whole span alone."""
        self.box, self.counts, self.memo, self.level = box, counts, {}, level
        self.lanewise = lanewise
        got = self._eval(cond_id)
        self.lanewise = False
        return (got[1], got[2]) if got is not None and got[0] == "bool" else (_FALSE, _FALSE)

    def tile_range(self, cond_id: int, rows: dict, row_counts: dict, keys_axis: str,
                   keys: int, n_tiles, level) -> tuple:
        """(first, end) i32, uniform over the block when the rows are: the key tiles from
        `first` up to but not including `end` hold every tile that cond, over the rows
        `rows` ({axis: (lo, hi)}, `row_counts` their spans), does not leave empty
        (end <= first when none). Lane l decides
        tiles l, l + 32, ... alone (`lanewise`), and the warp takes the least and greatest
        of those not empty, so a loop over [first, end) never visits the tiles before a
        causal diagonal, outside a window or outside the rows' documents."""
        k, b = self.k, self.k.b
        rounds = b.sdiv(b.add(n_tiles, L.i32(31)), L.i32(32))

        def scan(r, carried):
            first, end = carried
            j = b.add(b.mul(r, L.i32(32)), k.lane)
            key0 = b.mul(j, L.i32(keys))
            box = {**rows, keys_axis: (key0, b.add(key0, L.i32(keys - 1)))}
            _, empty = self.status(cond_id, box, {**row_counts, keys_axis: keys},
                                   level=level, lanewise=True)
            live = b.and_(b.icmp_signed("<", j, n_tiles), b.not_(empty))
            lo = b.select(live, j, L.i32(2**31 - 1))
            hi = b.select(live, b.add(j, L.i32(1)), L.i32(0))
            for width in (16, 8, 4, 2, 1):
                lo = L.binary(b, k.intr, "minimum", lo, _butterfly(k, lo, width))
                hi = L.binary(b, k.intr, "maximum", hi, _butterfly(k, hi, width))
            return [L.binary(b, k.intr, "minimum", first, lo),
                    L.binary(b, k.intr, "maximum", end, hi)]
        first, end = loop(b, k.fn, rounds, [L.i32(2**31 - 1), L.i32(0)], scan)
        return first, end

    def hoist(self, cond_id: int, box: dict, counts: dict, level) -> None:
        """Take the bounds of each input of cond that lies along the box's axes alone (the
        rows, fixed for the whole loop) now, for every later `status` at this level."""
        self.box, self.counts, self.level = box, counts, None
        pending, seen = [cond_id], set()
        while pending:
            op = self.ops[pending.pop()]
            if op.id in seen:
                continue
            seen.add(op.id)
            pending.extend(op.args)
            if op.op == "load" and any(a in box for a in op.axes):
                self.memo = {}
                got = self._input_interval(op)
                if got is not None:
                    self.hoisted[op.id, level] = got

    def _eval(self, vid: int):
        if vid not in self.memo:
            self.memo[vid] = self._compute(self.ops[vid])
        return self.memo[vid]

    def _compute(self, op):
        b, kind = self.k.b, op.op
        if kind == "iota":
            axis = op.attr("axis")
            if axis in self.box:
                return ("num", *self.box[axis])
            index = self.k.batch_index().get(axis)
            return None if index is None else ("num", index, index)
        if kind == "load":
            got = self.hoisted.get((op.id, self.level))
            got = got if got is not None else self._input_interval(op)
            if got is None or op.dtype != DType.BOOL:
                return got
            one, zero = L.i32(1), L.i32(0)     # a bool input: true (false) throughout
            return ("bool", b.icmp_signed("==", got[1], one), b.icmp_signed("==", got[2], zero))
        if kind in ("const", "param", "size"):
            value = self.k._elementwise(op, [], (None, None))
            return ("num", value, value) if value.type != L.I1 else \
                ("bool", value, b.not_(value))
        args = [self._eval(a) for a in op.args]
        if any(a is None for a in args):
            return None
        if kind == "convert" and args[0][0] == "num" and op.dtype.is_float:
            lo, hi = args[0][1:]
            if lo.type == L.F32:
                return args[0]
            return ("num", b.sitofp(lo, L.F32), b.sitofp(hi, L.F32))
        if kind in ("add", "sub", "neg", "mul") and all(a[0] == "num" for a in args):
            return self._arith(kind, args)
        if kind in _FLIP and all(a[0] == "num" for a in args):
            return self._compare(kind, args[0][1:], args[1][1:])
        if kind in ("logical_and", "logical_or", "logical_not") and \
                all(a[0] == "bool" for a in args):
            if kind == "logical_not":
                return ("bool", args[0][2], args[0][1])
            (_, t1, f1), (_, t2, f2) = args
            if kind == "logical_and":
                return ("bool", b.and_(t1, t2), b.or_(f1, f2))
            return ("bool", b.or_(t1, t2), b.and_(f1, f2))
        return None

    def _arith(self, kind, args):
        return ("num", *interval_arith(self.k.b, self.k.intr, kind,
                                       [a[1:] for a in args]))

    def _compare(self, kind, a, c):
        """a <op> c over intervals a = (lo, hi), c = (lo, hi)."""
        b, intr = self.k.b, self.k.intr
        if kind in ("ge", "gt"):
            return self._compare(_FLIP[kind], c, a)

        def cmp(op, x, y):
            return L.binary(b, intr, op, x, y)
        (alo, ahi), (clo, chi) = a, c
        if kind == "le":
            return ("bool", cmp("le", ahi, clo), cmp("gt", alo, chi))
        if kind == "lt":
            return ("bool", cmp("lt", ahi, clo), cmp("ge", alo, chi))
        apart = b.or_(cmp("lt", ahi, clo), cmp("gt", alo, chi))
        point = b.and_(b.and_(cmp("eq", alo, ahi), cmp("eq", clo, chi)), cmp("eq", alo, clo))
        return ("bool", point, apart) if kind == "eq" else ("bool", apart, point)

    def _input_interval(self, op):
        """("num", least, greatest) of an int32 input over the box: its element where it
        lies along no box axis, else the least and greatest element the box's span covers
        (positions past the end of the axis left out), each lane reading every 32nd and
        the warp reducing them; None for any other input."""
        k, b = self.k, self.k.b
        if op.dtype not in BOUNDED:
            return None
        if op.attr("blocks"):
            return self._blocks_interval(op)
        spans = [a for a in op.axes if a in self.box]
        if len(spans) > 1:
            return None
        at = {}
        for axis in op.axes:
            if axis not in self.box:
                at[axis] = k.batch_index().get(axis)
                if at[axis] is None:
                    return None             # a folded axis: the loop's, not the block's
        buffer = op.attr("buffer")
        if not spans:
            value = self._element(buffer, at)
            return ("num", value, value)
        (axis,) = spans
        lo, hi = self.box[axis]
        last = b.sub(k.size(axis), L.i32(1))
        hi = b.select(b.icmp_signed("<", last, hi), last, hi)
        least, most = L.i32(2**31 - 1), L.i32(-2**31)
        if self.lanewise:                   # this lane's box alone, every element
            for r in range(self.counts[axis]):
                i = b.add(lo, L.i32(r))
                inside = b.icmp_signed("<=", i, hi)
                value = self._element(buffer, {**at, axis: b.select(inside, i, lo)})
                least = b.select(inside, L.binary(b, k.intr, "minimum", least, value), least)
                most = b.select(inside, L.binary(b, k.intr, "maximum", most, value), most)
            return ("num", least, most)
        for r in range(-(-self.counts[axis] // 32)):
            i = b.add(lo, b.add(k.lane, L.i32(32 * r)))
            inside = b.icmp_signed("<=", i, hi)
            value = self._element(buffer, {**at, axis: b.select(inside, i, lo)})
            least = b.select(inside, L.binary(b, k.intr, "minimum", least, value), least)
            most = b.select(inside, L.binary(b, k.intr, "maximum", most, value), most)
        for width in (16, 8, 4, 2, 1):
            least = L.binary(b, k.intr, "minimum", least, _butterfly(k, least, width))
            most = L.binary(b, k.intr, "maximum", most, _butterfly(k, most, width))
        return ("num", least, most)

    def _element(self, buffer: str, at: dict):
        """An input's element as i32 (a bool one 0 or 1)."""
        value = self.k.element(buffer, at)
        return value if value.type == L.I32 else self.k.b.zext(value, L.I32)

    def _blocks_interval(self, op):
        """("num", least, greatest) of a block mask over the box: each fine axis's span
        covers blocks lo // size .. hi // size (at most (count - 1) // size + 2 of them),
        and every lane reads each of those blocks (a few: the tiles are no larger than
        the blocks they are cut from, usually)."""
        k, b = self.k, self.k.b
        size, fine_of = op.attr("block"), dict(op.attr("blocks"))
        ranges = {}                 # coarse axis: (first block, last block, most blocks)
        at = {}
        for axis in k.buffers[op.attr("buffer")].axes:
            fine = fine_of.get(axis, axis)
            if fine in self.box:
                lo, hi = self.box[fine]
                last = b.sub(k.size(fine), L.i32(1))
                hi = b.select(b.icmp_signed("<", last, hi), last, hi)
                ranges[axis] = (b.sdiv(lo, L.i32(size)), b.sdiv(hi, L.i32(size)),
                                (self.counts[fine] - 1) // size + 2)
                continue
            index = k.batch_index().get(fine)
            if index is None:
                return None             # a folded axis: the loop's, not the block's
            at[axis] = b.sdiv(index, L.i32(size)) if axis in fine_of else index
        least, most = L.i32(2**31 - 1), L.i32(-2**31)
        axes = list(ranges)

        def visit(i, chosen, inside):
            nonlocal least, most
            if i == len(axes):
                value = self._element(op.attr("buffer"), {**at, **chosen})
                least = b.select(inside, L.binary(b, k.intr, "minimum", least, value), least)
                most = b.select(inside, L.binary(b, k.intr, "maximum", most, value), most)
                return
            first, last, count = ranges[axes[i]]
            for r in range(count):
                block = b.add(first, L.i32(r))
                ok = b.icmp_signed("<=", block, last)
                visit(i + 1, {**chosen, axes[i]: b.select(ok, block, first)},
                      b.and_(inside, ok))
        visit(0, {}, _TRUE)
        return ("num", least, most)


def interval_arith(b, intr, kind: str, args) -> tuple:
    """(lo, hi) of `kind` (neg, add, sub, mul) over intervals `args` [(lo, hi), ...].

    int32 arithmetic wraps (the DSL's definition), so a sum or product whose interval
    leaves int32 holds wrapped values anywhere in it: the bounds are computed in 64 bits
    (exact for int32 operands) and such an interval becomes the whole int32 range, which
    decides nothing. fp32 intervals need no such care: rounding is monotone."""
    wide = args[0][0].type == L.I32
    if wide:
        args = [(b.sext(lo, L.I64), b.sext(hi, L.I64)) for lo, hi in args]
    if kind == "neg":
        lo, hi = args[0]
        lo, hi = L.unary(b, intr, "neg", hi), L.unary(b, intr, "neg", lo)
    elif kind == "add":
        (alo, ahi), (blo, bhi) = args
        lo, hi = L.binary(b, intr, "add", alo, blo), L.binary(b, intr, "add", ahi, bhi)
    elif kind == "sub":
        (alo, ahi), (blo, bhi) = args
        lo, hi = L.binary(b, intr, "sub", alo, bhi), L.binary(b, intr, "sub", ahi, blo)
    else:
        (alo, ahi), (blo, bhi) = args
        products = [L.binary(b, intr, "mul", x, y) for x in (alo, ahi) for y in (blo, bhi)]
        lo = hi = products[0]
        for p in products[1:]:
            lo, hi = L.binary(b, intr, "minimum", lo, p), L.binary(b, intr, "maximum", hi, p)
    if not wide:
        return lo, hi
    least, most = ir.Constant(L.I64, -2 ** 31), ir.Constant(L.I64, 2 ** 31 - 1)
    fits = b.and_(b.icmp_signed(">=", lo, least), b.icmp_signed("<=", hi, most))
    return (b.select(fits, b.trunc(lo, L.I32), L.i32(-2 ** 31)),
            b.select(fits, b.trunc(hi, L.I32), L.i32(2 ** 31 - 1)))


def _butterfly(k, value, width: int):
    """The value of the lane `width` apart (shfl.sync.bfly over the full warp)."""
    return k.intr.call(k.b, "llvm.nvvm.shfl.sync.bfly.i32", L.I32,
                       [L.i32(0xFFFFFFFF), value, L.i32(width), L.i32(31)])
