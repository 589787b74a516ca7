"""Stage 2 rewrite: sums over one axis of weights times an input, streamed along that axis.

Attention's derived backward is made of such sums. With P the softmax of the scores
over T, dP = sum(dout * v, over=E) and Δ the row term,

    dq = sum(((dP - Δ) * P * scale) * k, over=T)     rows S, streamed T
    dk = sum(((dP - Δ) * P * scale) * q, over=S)     rows T, streamed S
    dv = sum(P * dout, over=S)                       rows T, streamed S

Each is `sum(w * b, over=X)` with b an input over [batch, X, C] and the weight w an
elementwise function, over [batch, R, X], of contractions of two inputs (one over R,
one over X), of tensors over the batch axes, R and X, and of positions. Walked X a tile
at a time, the block keeps the [R tile, C] sum in registers and never writes w: a loop
of dots with no carried state but the sums (the forward's online softmax needs more).

What w must not hold is another reduction along R or X: those are staged before the
loop (`stream_staging.py`): the softmax P becomes exp(x - lse) with the log-sum-exp lse
of its logits computed by a streamed statistics kernel, and a row term such as Δ a
temporary of its own. `find_sum` names the roles once that is done; NotStreamable says
why a sum is not one.

Grouped-query heads fold into the loop. With q over [G, R, S] sharing k and v over [G, T],
dk = sum_S(sum_R(w * q)): the R query heads of a group are walked along with S (the loop
runs over R x the S tiles) and the block keeps one [T tile, D] sum, rather than writing a
sum per query head for a later kernel to add up.
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.dsl.dtypes import DType
from plait.dsl.graph import rebuild
from plait.dsl.node import OPS, Node, topo_order

from .streaming import (MAX_HEAD, PASS_THROUGH, SCORE_SOURCES, NotStreamable, _is, _skip,
                        _uncast, outer_sum)


@dataclass(frozen=True)
class SumTerm:
    """One output of a streamed-sum kernel: sum(weight * operand, over=keys)."""
    name: str                  # the output buffer
    out: Node                  # the value stored (the sum, or a cast/permute of it)
    total: Node                # the sum over the streamed axis
    weight: Node               # w over [batch, rows, keys]
    operand: Node              # b, an input over [batch, folded, keys, cols]
    cols: str
    folded: tuple[str, ...] = ()   # axes summed with the keys (grouped query heads)


@dataclass(frozen=True)
class StreamedSums:
    """The roles in one kernel of streamed sums sharing their rows and streamed axis."""
    terms: tuple[SumTerm, ...]
    scores: tuple[Node, ...]     # contractions sum(a * c, over=depth) inside the weights
    residents: tuple[Node, ...]  # inputs over [batch, rows, width]: copied once per block
    streamed: tuple[Node, ...]   # inputs over [batch, keys, width]: copied each step
    batch: tuple[str, ...]
    rows: str
    keys: str
    softmax: tuple[Node, ...] = ()  # exp(x - lse) nodes the stager put in place of softmaxes
    # Sums over the rows instead (sum(w * b, over=rows), b a resident): each block adds its
    # rows' part per key tile into an fp32 buffer zeroed before (`sums_merge.py`).
    scattered: tuple[SumTerm, ...] = ()
    folded: tuple[str, ...] = ()    # axes the loop walks with the keys (the block lacks)

    def text(self) -> str:
        outs = ", ".join(t.name for t in self.terms)
        batch = f" batch [{','.join(self.batch)}]" if self.batch else ""
        names = lambda ns: ", ".join(n.attr("name") for n in ns)  # noqa: E731
        added = "".join(f"; adds sum over {self.rows} into {t.name}" for t in self.scattered)
        over = ",".join(self.folded + (self.keys,))
        return (f"stream {self.keys}: sums over {over} giving {outs}, rows {self.rows}, "
                f"reading {names(self.residents)} per block and {names(self.streamed)} per "
                f"step{batch}{added}")


def with_node(out: Node, old: Node, new: Node) -> Node:
    """out with node `old` (by identity) replaced by `new`, its users rebuilt."""
    return rebuild({"o": out}, lambda n, ins: new if n is old else (
        n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs, n.loc)))["o"]


def split_sum(out: Node) -> tuple[Node, Node, Node, str, tuple[str, ...]]:
    """(total, weight, operand, streamed axis, folded axes) of out = sum(w * b, over=X)
    behind casts and permutes, b an input; or of nested sums over X and axes F of w * b
    (b over [..., F, X, C]: F folds into the loop over X). NotStreamable otherwise."""
    total = outer_sum(out)
    axes, prod = [total.attr("axis")], _skip(total.inputs[0])
    while _is(prod, "sum"):
        axes.append(prod.attr("axis"))
        prod = _skip(prod.inputs[0])
    if prod.op != "mul":
        raise NotStreamable(f"the sum over {','.join(axes)} is not of a product")
    for w, b in (prod.inputs, prod.inputs[::-1]):
        w, b = _skip(w), _uncast(_skip(b))
        if b.op != "input" or not set(axes) <= set(w.axes) & set(b.axes) or \
                not set(b.axes) - set(w.axes):
            continue
        if len(axes) == 1:
            return total, w, b, axes[0], ()
        keys = b.axes[-2]
        if keys not in axes:
            raise NotStreamable(f"{b.attr('name')} is stored [{','.join(b.axes)}]; a sum over "
                                f"{','.join(axes)} streams the axis before its columns")
        return total, w, b, keys, tuple(a for a in b.axes if a in axes and a != keys)
    raise NotStreamable(f"the sum over {','.join(axes)} is not of a weight times an input "
                        "that runs along it")


def _term(name: str, out: Node) -> tuple[SumTerm, tuple, str]:
    total, w, b, keys, folded = split_sum(out)
    # The rows: the weight's innermost axis the operand lacks; the weight's other axes
    # are the batch, which the operand may lack some of (grouped-query heads share k, v).
    lacking = [a for a in w.axes if a not in b.axes]
    cols = [a for a in b.axes if a not in w.axes]
    if not lacking or len(cols) != 1:
        raise NotStreamable(f"the operand of {name} runs along {len(cols)} axes the weight "
                            "lacks; streaming takes one")
    rows = lacking[-1]
    batch = tuple(a for a in w.axes if a not in (keys, rows) + folded)
    want = tuple(a for a in batch if a in b.axes) + folded + (keys, cols[0])
    if b.axes != want:
        raise NotStreamable(f"{b.attr('name')} is stored [{','.join(b.axes)}]; streaming "
                            f"takes [{','.join(want)}]")
    if set(out.axes) != set(batch + (rows, cols[0])):
        raise NotStreamable(f"{name} is over [{','.join(out.axes)}]")
    return SumTerm(name, out, total, w, b, cols[0], folded), batch, rows


def find_sums(terms: dict[str, Node]) -> StreamedSums:
    """The roles of outputs that are sums over one streamed axis with shared rows (their
    reductions other than the score contractions already staged out)."""
    found = [_term(name, out) for name, out in terms.items()]
    first, batch, rows = found[0]
    keys, folded = _keys(first), first.folded
    for term, b, r in found:
        if (b, r, _keys(term), term.folded) != (batch, rows, keys, folded):
            raise NotStreamable(f"{term.name} streams another axis or other rows than "
                                f"{first.name}")
    scores, residents, streamed = [], {}, {}
    for term, _, _ in found:
        streamed.setdefault(term.operand.attr("name"), term.operand)
        weight_roles(term, batch, rows, keys, scores, residents, streamed, folded)
    check_tensors(residents, streamed)
    return StreamedSums(tuple(t for t, _, _ in found), tuple(scores),
                        tuple(residents.values()), tuple(streamed.values()), batch, rows, keys,
                        folded=folded)


def _keys(term: SumTerm) -> str:
    """The streamed axis: the operand's rows (the axis before its columns)."""
    return term.operand.axes[-2]


def weight_roles(term: SumTerm, batch, rows: str, keys: str, scores: list, residents: dict,
                 streamed: dict, folded: tuple[str, ...] = ()) -> None:
    """Add the score contractions in term's weight and their operands to the lists (by
    name); NotStreamable if the weight holds anything a loop step cannot compute."""
    nodes = topo_order([term.weight])
    for n in nodes:
        if n.op in OPS and OPS[n.op].kind == "reduce":
            a, c = _contraction(n, batch, rows, keys, folded)
            if n not in scores:
                scores.append(n)
            residents.setdefault(a.attr("name"), a)
            streamed.setdefault(c.attr("name"), c)
    inside = {m.uid for s in scores for m in topo_order([s])}
    inside |= {n.inputs[0].uid for n in nodes if n.op == "blocked" and   # a block mask,
               n.inputs[0].op == "input"}                                # read at its
    for n in nodes:                                                      # fine axes
        if n.uid in inside:
            continue
        if n.op in ("input", "blocked") and (n.op == "input" or n.inputs[0].uid in inside):
            if not set(n.axes) <= set(batch + folded + (rows, keys)):
                raise NotStreamable(f"the weight of {term.name} reads "
                                    f"{(n.inputs[0] if n.inputs else n).attr('name')!r} "
                                    f"over [{','.join(n.axes)}]")
        elif n.op not in SCORE_SOURCES and n.op not in PASS_THROUGH and \
                n.op != "stop_gradient" and (n.op not in OPS or
                                             OPS[n.op].kind != "elementwise"):
            raise NotStreamable(f"the weight of {term.name} passes through {n.op}")


def check_tensors(residents: dict, streamed: dict) -> None:
    """One 16-bit float dtype for every tile, and no tensor both resident and streamed."""
    tensors = list(residents.values()) + list(streamed.values())
    if len({t.dtype for t in tensors}) != 1 or tensors[0].dtype not in (DType.BF16, DType.FP16):
        raise NotStreamable("the tensors of a streamed sum are " +
                            "/".join(sorted({str(t.dtype) for t in tensors})) +
                            "; streaming takes bf16 or fp16 for all")
    overlap = set(residents) & set(streamed)
    if overlap:
        raise NotStreamable(f"{', '.join(sorted(overlap))} is read both per block and per step")


def _contraction(n: Node, batch, rows: str, keys: str, folded=()) -> tuple[Node, Node]:
    """(resident, streamed) operands of a score contraction sum(a * c, over=depth)."""
    depth = n.attr("axis")
    prod = _skip(n.inputs[0])
    if n.op != "sum" or prod.op != "mul":
        raise NotStreamable(f"the weights hold a {n.op} over {depth} that is not a "
                            "contraction (it should have been staged before the loop)")
    a, c = (_uncast(_skip(i)) for i in prod.inputs)
    if keys in a.axes:
        a, c = c, a
    if a.op != "input" or c.op != "input":
        raise NotStreamable(f"the contraction over {depth} in the weights has computed "
                            "operands")
    for t, axis, full in ((a, rows, True), (c, keys, False)):
        want = tuple(x for x in batch if full or x in t.axes) + (() if full else folded) + \
            (axis, depth)
        if t.axes != want:
            raise NotStreamable(f"{t.attr('name')} is stored [{','.join(t.axes)}]; a streamed "
                                f"sum takes [{','.join(want)}]")
    return a, c


def check_sum_sizes(ss: StreamedSums, sizes: dict[str, int]) -> None:
    """Rows of every tile whole 16 bytes, widths held in registers."""
    widths = {t.axes[-1] for t in ss.residents + ss.streamed}
    for axis in sorted(widths):
        n = sizes[axis]
        if n > MAX_HEAD:
            raise NotStreamable(f"{axis} = {n}: a streamed tile holds at most {MAX_HEAD}")
        if n % 8:
            raise NotStreamable(f"{axis} = {n}: rows of the streamed tensors must be whole "
                                "16 bytes (a multiple of 8 elements)")
