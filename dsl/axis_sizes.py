"""Axis sizes the reshaping ops derive: the relations they put on the axis-size environment.

An axis name has one size across an algorithm (broadcasting is by name, so two tensors
over T must agree on T's extent). The inputs' shapes give the sizes of the signature's
axes; an op that makes a new axis (split_axis, merge_axes, slice, pad, concat) records
how its size follows from others, as relations on its node (attr `sizes`):

    ("product", P, (A, B, ...))     size(P) == size(A) * size(B) * ...
    ("sum", S, k, (A, ...))         size(S) == k + size(A) + ...
    ("within", A, k)                size(A) >= k          (a slice's stop)

`derive_sizes` solves them from the sizes known, in any direction where one size is
missing (a backward graph may know H and D from a cotangent and derive C), and checks
every relation whose sizes are all known, raising at the op's source line. A size that
cannot be derived is left out; whoever needs it says so.
"""
from __future__ import annotations

from math import prod

from .errors import PlaitError


def _relations(nodes):
    for n in nodes:
        for rel in n.attr("sizes") or ():
            yield n, rel


def _solve_product(n, rel, sizes) -> bool:
    _, whole, parts = rel
    known = [p for p in parts if p in sizes]
    if whole in sizes and len(known) == len(parts):
        if sizes[whole] != prod(sizes[p] for p in parts):
            raise PlaitError(f"{n.op}: axis {whole} has size {sizes[whole]}, but "
                             + " * ".join(f"{p} ({sizes[p]})" for p in parts)
                             + f" = {prod(sizes[p] for p in parts)}", n.loc)
        return False
    if whole not in sizes and len(known) == len(parts):
        sizes[whole] = prod(sizes[p] for p in parts)
        return True
    if whole in sizes and len(known) == len(parts) - 1:
        (missing,) = [p for p in parts if p not in sizes]
        rest = prod(sizes[p] for p in known)
        if sizes[whole] % rest:
            raise PlaitError(f"{n.op}: axis {whole} of size {sizes[whole]} does not split "
                             f"into {' x '.join(parts)}: {sizes[whole]} is not a multiple of "
                             + " * ".join(f"{p} ({sizes[p]})" for p in known), n.loc)
        sizes[missing] = sizes[whole] // rest
        return True
    return False


def _solve_sum(n, rel, sizes) -> bool:
    _, total, const, terms = rel
    known = [t for t in terms if t in sizes]
    if total in sizes and len(known) == len(terms):
        if sizes[total] != const + sum(sizes[t] for t in terms):
            raise PlaitError(f"{n.op}: axis {total} has size {sizes[total]}, but "
                             f"{_spell_sum(const, terms, sizes)}", n.loc)
        return False
    if total not in sizes and len(known) == len(terms):
        sizes[total] = const + sum(sizes[t] for t in terms)
        if sizes[total] < 1:
            raise PlaitError(f"{n.op}: axis {total} would have size {sizes[total]} "
                             f"({_spell_sum(const, terms, sizes)}); plait needs >= 1", n.loc)
        return True
    if total in sizes and len(known) == len(terms) - 1:
        (missing,) = [t for t in terms if t not in sizes]
        sizes[missing] = sizes[total] - const - sum(sizes[t] for t in known)
        if sizes[missing] < 1:
            raise PlaitError(f"{n.op}: axis {missing} would have size {sizes[missing]} "
                             f"(axis {total} is {sizes[total]}); plait needs >= 1", n.loc)
        return True
    return False


def _spell_sum(const, terms, sizes) -> str:
    parts = [f"{t} ({sizes[t]})" for t in terms] + ([str(const)] if const or not terms else [])
    return " + ".join(parts) + f" = {const + sum(sizes[t] for t in terms)}"


def derive_sizes(nodes, sizes: dict[str, int]) -> dict[str, int]:
    """`sizes` plus every size the nodes' relations derive; raises where one is broken."""
    out = dict(sizes)
    # given sizes (a sum of no axes) first, so a split checks them rather than derives
    relations = sorted(_relations(nodes), key=lambda r: not (r[1][0] == "sum" and
                                                              not r[1][3]))
    progress = True
    while progress:
        progress = False
        for n, rel in relations:
            if rel[0] == "product":
                progress |= _solve_product(n, rel, out)
            elif rel[0] == "sum":
                progress |= _solve_sum(n, rel, out)
    for n, rel in relations:
        if rel[0] == "within" and rel[1] in out and out[rel[1]] < rel[2]:
            raise PlaitError(f"{n.op}: the range ends at {rel[2]}, past the end of axis "
                             f"{rel[1]} (size {out[rel[1]]})", n.loc)
    return out
