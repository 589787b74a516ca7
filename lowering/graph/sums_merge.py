"""Stage 2 rewrite: a streamed sum over the rows of another kernel's loop, added up there.

Attention's derived backward has two kernels of streamed sums over the same weights:
dq = sum_T(w * k) (rows S, walking T) and dk, dv = sum_S(w * q), sum_S(p * dout) (rows T,
walking S). The dk/dv kernel computes every w tile that dq needs; a loop of dq's own
computes them again (three products per tile where w^T . k alone is one). Merged, the
dk/dv kernel adds each block's sum over its T rows, per S tile, into an fp32 buffer
[batch, S, D] zeroed before it runs (atomic adds: the blocks of other T rows add into the
same elements), and a kernel after it casts the buffer into dq's dtype:

    before:  attention.bwd.dq   stream T: sums over T giving dq, rows S
             attention.bwd.dk   stream S: sums over S giving dk, dv, rows T
    after:   attention.bwd.dk   stream S: ... giving dk, dv, rows T; adds sum over T into
                                attention.bwd.dq.acc
             attention.bwd.dq   dq = cast(attention.bwd.dq.acc)

The sum keeps its kernel name for the cast, so the schedule chooses there: the dq
kernel's `reduction: atomic` merges, `two_stage` keeps dq's own loop, and without either
the target table's `sums_accumulate` decides. The float sums are added in another order
than a loop's (fp32 either way).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from plait.dsl.dtypes import DType
from plait.dsl.node import Node, make_attrs

from ..artifact import Buffer
from .streaming import NotStreamable
from .streaming_sums import StreamedSums, SumTerm, check_tensors, weight_roles, with_node


@dataclass(frozen=True)
class Merged:
    host: StreamedSums                        # with the guest's sums as `scattered`
    finish: tuple[tuple[str, Node], ...]      # (guest output, its value from the buffer)
    temps: tuple[Buffer, ...]                 # the fp32 buffers, zeroed before the host


def merge(host: StreamedSums, guest: StreamedSums, graph_name: str) -> Merged:
    """The guest's sums added up in the host's loop; NotStreamable says why they cannot
    be (another batch, rows and keys not swapped, an operand the host cannot keep)."""
    if host.folded or guest.folded:
        raise NotStreamable(f"the kernel of {_names(host if host.folded else guest)} folds "
                            f"{','.join(host.folded or guest.folded)} into its loop; its sums "
                            "do not merge")
    if (guest.rows, guest.keys) != (host.keys, host.rows) or guest.batch != host.batch:
        raise NotStreamable(f"{_names(guest)} walk {guest.keys} over rows {guest.rows}; the "
                            f"kernel of {_names(host)} walks {host.keys} over rows {host.rows}")
    scores = list(host.scores)
    residents = {n.attr("name"): n for n in host.residents}
    streamed = {n.attr("name"): n for n in host.streamed}
    scattered, finish, temps = [], [], []
    for t in guest.terms:
        want = host.batch + (host.rows, t.cols)
        if t.operand.axes != want:
            raise NotStreamable(f"{t.operand.attr('name')} is stored "
                                f"[{','.join(t.operand.axes)}]; a block keeps [{','.join(want)}]")
        acc_axes = host.batch + (host.keys, t.cols)
        if t.total.axes != acc_axes:
            raise NotStreamable(f"{t.name} is summed over [{','.join(t.total.axes)}], not "
                                f"[{','.join(acc_axes)}]")
        residents.setdefault(t.operand.attr("name"), t.operand)
        weight_roles(t, host.batch, host.rows, host.keys, scores, residents, streamed)
        name = f"{graph_name}.{t.name}.acc"
        temps.append(Buffer(name, DType.FP32, acc_axes, "temp", zero=True))
        scattered.append(SumTerm(name, t.total, t.total, t.weight, t.operand, t.cols))
        finish.append((t.name, _from_buffer(t, name, acc_axes)))
    check_tensors(residents, streamed)
    softmax = {n.uid: n for n in host.softmax + guest.softmax}
    merged = replace(host, scores=tuple(scores), residents=tuple(residents.values()),
                     streamed=tuple(streamed.values()), softmax=tuple(softmax.values()),
                     scattered=host.scattered + tuple(scattered))
    return Merged(merged, tuple(finish), tuple(temps))


def _from_buffer(t: SumTerm, name: str, axes) -> Node:
    """The term's output with its sum read from the fp32 buffer (cast to the sum's dtype)."""
    loaded = Node("input", (), tuple(axes), DType.FP32, make_attrs(name=name))
    if t.total.dtype != DType.FP32:
        loaded = Node("cast", (loaded,), loaded.axes, t.total.dtype, ())
    return with_node(t.out, t.total, loaded)


def _names(ss: StreamedSums) -> str:
    return ", ".join(t.name for t in ss.terms)
