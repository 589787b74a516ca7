"""Stage 2: the kernels a streamed sum (`streaming_sums.py`) needs before its loop.

A streamed sum's weight may hold only elementwise ops over its tiles and the score
contractions the loop computes. Attention's backward weights hold more, and each is
taken out of the loop here:

- a softmax p over an axis A of logits x becomes exp(x - lse), lse the log-sum-exp of x
  over A: one temporary, written by a streamed statistics kernel (the online softmax
  without v) and shared by every sum that needs it;
- a softmax the backward reads over the forward's saved log-sum-exp (exp(x - lse), lse
  an input over the rows: `autodiff/saving.py`) needs nothing first;
- any other reduction (the row term sum_E(dout * out), after simplification) becomes a
  temporary of its own, planned like any kernel, with the softmax-weighted
  contractions inside it (the forward recomputed, where the forward did not save its
  output) streamed into temporaries first.

`stage_sums` returns those kernels in the order they run, and the sums grouped into
kernels: outputs with the same streamed axis and rows (dk and dv) share one loop, and a
kernel whose rows another one walks (dq beside dk and dv) may be added up in that one's
loop (`sums_merge.py`), leaving a cast after it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.graph import rebuild
from plait.dsl.node import OPS, Node, make_attrs, topo_order

from ..artifact import Buffer
from .streaming import (NotStreamable, Stream, _skip, _uncast, check_sizes, find_logsumexp,
                        find_stream, softmax_logits)
from .streaming_sums import StreamedSums, check_sum_sizes, find_sums, split_sum, with_node
from .sums_merge import merge


@dataclass
class StagedSums:
    streams: list[tuple[str, Stream]] = field(default_factory=list)   # temporaries, streamed
    plain: list[tuple[str, Node]] = field(default_factory=list)       # temporaries, planned
    sums: list[tuple[tuple[str, ...], StreamedSums]] = field(default_factory=list)
    temps: list[Buffer] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)
    finish: list[tuple[str, Node]] = field(default_factory=list)    # after the sums: casts

    @property
    def outputs(self) -> set[str]:
        return {name for names, _ in self.sums for name in names} | \
            {name for name, _ in self.finish}


def _node(op, inputs, axes, dtype, **attrs) -> Node:
    return Node(op, tuple(inputs), tuple(axes), dtype, make_attrs(**attrs))


def _has_scores(w: Node, keys: str) -> bool:
    """Does the weight hold a softmax and a contraction of two inputs, one along the
    streamed axis? (A weight without a softmax, a GEMM epilogue's gradient, keeps its
    product in memory: recomputing it per step would cost more than reading it.)"""
    nodes = topo_order([w])
    return any(_is_score(n, keys) for n in nodes) and any(_is_softmax(n) for n in nodes)


def _saved_lse_logits(n: Node) -> Node | None:
    """x where n = exp(x - lse), lse an input over all of x's axes but one (the forward's
    saved log-sum-exp); None otherwise."""
    if n.op != "exp" or _skip(n.inputs[0]).op != "sub":
        return None
    x, lse = (_skip(i) for i in _skip(n.inputs[0]).inputs)
    if lse.op != "input" or not set(lse.axes) < set(x.axes) or \
            len(lse.axes) != len(x.axes) - 1:
        return None
    return x


def _is_softmax(n: Node) -> bool:
    if _saved_lse_logits(n) is not None:
        return True
    if n.op != "div" or _skip(n.inputs[1]).op != "sum":
        return False
    try:
        softmax_logits(n, _skip(n.inputs[1]).attr("axis"))
    except NotStreamable:
        return False
    return True


def _is_score(n: Node, keys: str) -> bool:
    if n.op != "sum" or _skip(n.inputs[0]).op != "mul":
        return False
    a, c = (_uncast(_skip(i)) for i in _skip(n.inputs[0]).inputs)
    return a.op == "input" and c.op == "input" and (keys in a.axes) != (keys in c.axes) \
        and n.attr("axis") != keys


class _Stager:
    def __init__(self, graph_name: str, sizes: dict[str, int]):
        self.graph = graph_name
        self.sizes = sizes
        self.out = StagedSums()
        self.lse: dict[tuple, Node] = {}       # (logits uid, axis) -> the temporary's input
        self.reduced: dict[int, Node] = {}     # reduction uid -> the temporary's input
        self.softmax: list[Node] = []          # the exp(x - lse) put in place of each
        self.memo: dict[int, Node] = {}        # weight node uid -> staged (shared by terms)

    def _temp(self, kind: str, axes, dtype: DType) -> tuple[str, Node]:
        name = f"{self.graph}.{kind}{len(self.out.temps)}"
        self.out.temps.append(Buffer(name, dtype, tuple(axes), "temp"))
        return name, _node("input", (), axes, dtype, name=name)

    def logsumexp(self, logits: Node, axis: str) -> Node:
        key = (logits.uid, axis)
        if key not in self.lse:
            rest = tuple(a for a in logits.axes if a != axis)
            m = _node("max", (logits,), rest, logits.dtype, axis=axis)
            e = _node("exp", (_node("sub", (logits, m), logits.axes, logits.dtype),),
                      logits.axes, logits.dtype)
            total = _node("sum", (e,), rest, logits.dtype, axis=axis)
            value = _node("add", (_node("log", (total,), rest, logits.dtype), m), rest,
                          logits.dtype)
            st = find_logsumexp(value, logits, axis)
            check_sizes(st, self.sizes)
            name, self.lse[key] = self._temp("lse", rest, DType.FP32)
            self.out.streams.append((name, st))
        return self.lse[key]

    def reduction(self, n: Node) -> Node:
        """A reduction inside a weight, written into a temporary before the loop."""
        if n.uid not in self.reduced:
            value = self._stream_inside(n)
            name, self.reduced[n.uid] = self._temp("r", n.axes, DType.FP32)
            self.out.plain.append((name, value))
        return self.reduced[n.uid]

    def _stream_inside(self, n: Node) -> Node:
        """n with its softmax-weighted contractions streamed into temporaries."""
        def replace(m: Node, ins):
            if m.op == "sum":
                try:
                    st = find_stream(m)
                    check_sizes(st, self.sizes)
                except NotStreamable:
                    pass
                else:
                    name, loaded = self._temp("o", m.axes, m.dtype)
                    self.out.streams.append((name, st))
                    return loaded
            return m if ins == m.inputs else Node(m.op, ins, m.axes, m.dtype, m.attrs, m.loc)
        return rebuild({"v": n}, replace)["v"]

    def weight(self, w: Node, keys: str) -> Node:
        """w with its softmaxes over the log-sum-exp and its other reductions staged."""
        memo = self.memo

        def lower(n: Node) -> Node:
            if n.uid in memo:
                return memo[n.uid]
            out = None
            saved = _saved_lse_logits(n)
            if saved is not None:            # over the forward's log-sum-exp already
                x = lower(saved)
                out = n if x is saved else Node(n.op, (_node(
                    "sub", (x, _skip(n.inputs[0]).inputs[1]), n.axes, DType.FP32),), n.axes,
                    n.dtype, n.attrs, n.loc)
                self.softmax.append(out)
            elif n.op == "div" and _skip(n.inputs[1]).op == "sum":
                axis = _skip(n.inputs[1]).attr("axis")
                try:
                    logits = softmax_logits(n, axis)
                except NotStreamable:
                    logits = None
                if logits is not None:
                    x = lower(logits)
                    lse = self.logsumexp(logits, axis)
                    out = _node("exp", (_node("sub", (x, lse), n.axes, DType.FP32),), n.axes,
                                DType.FP32)
                    self.softmax.append(out)
            if out is None and n.op in OPS and OPS[n.op].kind == "reduce":
                out = n if _is_score(n, keys) else self.reduction(n)
            if out is None:
                ins = tuple(lower(i) for i in n.inputs)
                out = n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs, n.loc)
            memo[n.uid] = out
            return out
        return lower(w)


def stage_sums(graph_name: str, outputs: dict[str, Node], sizes: dict[str, int],
               wanted=lambda name: True, reduction=lambda kernel: None,
               accumulate: bool = False) -> StagedSums:
    """The streamed sums among `outputs` (those `wanted` allows) and what they need
    computed first; an output that has the shape but cannot stream gets a reason.
    `reduction(kernel name)`: the schedule's 'atomic' to add a kernel's sums up in the
    loop of a kernel walking its rows, 'two_stage' to keep its own loop, or None to
    leave it to `accumulate`."""
    groups: dict[tuple, dict[str, tuple]] = {}
    for name, node in outputs.items():
        if not wanted(name):
            continue
        try:
            total, w, b, keys, _ = split_sum(node)
        except NotStreamable:
            continue
        if _has_scores(w, keys):
            groups.setdefault((keys, frozenset(w.axes)), {})[name] = (node, w)
    stager = _Stager(graph_name, sizes)
    for group in groups.values():
        kept = (list(stager.out.streams), list(stager.out.plain), list(stager.out.temps),
                dict(stager.lse), dict(stager.reduced), dict(stager.memo))
        try:
            terms = {name: with_node(node, w, stager.weight(w, split_sum(node)[3]))
                     for name, (node, w) in group.items()}
            ss = find_sums(terms)
            # The softmaxes this group's weights hold (staged now or for an earlier group).
            made = {n.uid for n in stager.softmax}
            ss = replace(ss, softmax=tuple({n.uid: n for t in ss.terms
                                            for n in topo_order([t.weight])
                                            if n.uid in made}.values()))
            check_sum_sizes(ss, sizes)
        except NotStreamable as e:
            (stager.out.streams, stager.out.plain, stager.out.temps, stager.lse,
             stager.reduced, stager.memo) = kept
            for name in group:
                stager.out.why[name] = str(e)
            continue
        stager.out.sums.append((tuple(group), ss))
    _merge_sums(stager.out, graph_name, reduction, accumulate)
    return stager.out


def _merge_sums(out: StagedSums, graph_name: str, reduction, accumulate: bool) -> None:
    """Each kernel of sums whose `reduction` is 'atomic' (or None, with `accumulate`)
    merged into another kernel walking its rows; the one with fewer sums is the guest
    (dq into dk/dv). An explicit 'atomic' that cannot merge is an error."""
    for names, guest in sorted(out.sums, key=lambda g: len(g[0])):
        kernel = f"{graph_name}.{names[0]}"
        choice = reduction(kernel)
        if choice == "two_stage" or choice is None and not accumulate or \
                names not in [n for n, _ in out.sums]:
            continue
        why = "no other kernel of streamed sums walks its rows"
        for i, (host_names, host) in enumerate(out.sums):
            if host_names == names:
                continue
            try:
                m = merge(host, guest, graph_name)
            except NotStreamable as e:
                why = str(e)
                continue
            out.sums[i] = (host_names, m.host)
            out.sums = [(n, ss) for n, ss in out.sums if n != names]
            out.finish.extend(m.finish)
            out.temps.extend(m.temps)
            break
        else:
            if choice == "atomic":
                raise PlaitError(f"kernel {kernel}: reduction 'atomic' adds its sums up in "
                                 f"another streamed kernel's loop, but {why}")
