"""A program structure (programs.py) run as torch float64 ops: a second, independent
meaning for the reference evaluator to agree with.

Nothing here calls plait: axes are tracked by name beside each tensor (dims kept in the
order axes first appear among the inputs, as plait's canonical order is defined), and
each op is torch's own (softmax, logsumexp, amax, ...). Float casts are the identity, as
in the float64 reference (a cast rounds only where rounding is asked for); int32 values
are int64 here (every int the grammar makes is far below 2^31).
"""
from __future__ import annotations

import torch

_UNARY = {"neg": lambda v: -v, "exp": lambda v: torch.exp(-0.5 * v * v), "tanh": torch.tanh,
          "sigmoid": torch.sigmoid, "square": lambda v: v * torch.tanh(v),
          "relu": torch.relu, "abs": torch.abs}
_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul,
           "div": lambda a, b: a / (torch.abs(b) + 1.0),
           "maximum": torch.maximum, "minimum": torch.minimum}
_CMP = {"gt": torch.gt, "lt": torch.lt, "ge": torch.ge, "le": torch.le, "eq": torch.eq,
        "ne": torch.ne}


# Result dim order follows the DSL: a unary op, a cast, sum/max/min keep their operand's
# order (an input's is its storage order); binary ops, where, comparisons, mean (a sum
# divided by a size) give the canonical order.
_ORDER_KEEPING = {"neg", "tanh", "sigmoid", "abs"}


class Interp:
    """Evaluates expressions over named axes; `leaves` are the torch inputs by name."""

    def __init__(self, structure, leaves: dict, sizes: dict):
        params, _ = structure
        self.params = dict(params)
        self.outs = structure[1]
        self.sizes = sizes
        order = []
        for _, (axes, _) in params:
            order += [a for a in axes if a not in order]
        self.order = order
        self.leaves = leaves

    def canonical(self, axes):
        return tuple(a for a in self.order if a in axes)

    def view(self, value, axes, target):
        """value (dims in `axes` order) seen over `target`, size-1 dims where absent."""
        t = value.permute(*[axes.index(a) for a in target if a in axes]) if axes else value
        shape = [self.sizes[a] if a in axes else 1 for a in target]
        return t.reshape(shape)

    def canon(self, pair):
        """pair with its dims in canonical order (a binary op's result order)."""
        v, axes = pair
        target = self.canonical(axes)
        return self.view(v, axes, target), target

    def join(self, *pairs):
        target = self.canonical(set().union(*(axes for _, axes in pairs)))
        return [self.view(v, axes, target) for v, axes in pairs], target

    def reduce(self, fn, pair, over):
        v, axes = pair
        full = v.expand(*[self.sizes[a] for a in axes]) if axes else v
        dims = [axes.index(a) for a in over]
        return fn(full, dims), tuple(a for a in axes if a not in over)

    def masked(self, pair, mask):
        if mask is None:
            return pair
        (m, v), axes = self.join(self.run(mask), pair)
        return torch.where(m, v, torch.tensor(float("-inf"), dtype=v.dtype)), axes

    def run(self, e):
        """(tensor, axes) of expression e."""
        tag = e[0]
        if tag == "in":
            return self.leaves[e[1]], self.params[e[1]][0]
        if tag == "u":
            v, axes = self.run(e[2])
            pair = _UNARY[e[1]](v), axes
            return pair if e[1] in _ORDER_KEEPING else self.canon(pair)
        if tag in ("b", "iadd"):
            fn = _BINARY[e[1]] if tag == "b" else torch.add
            (a, b), axes = self.join(*map(self.run, e[-2:]))
            return fn(a, b), axes
        if tag == "where":
            (c, a, b), axes = self.join(*map(self.run, e[1:]))
            return torch.where(c, a, b), axes
        if tag in ("red", "ired"):
            over = e[2] if isinstance(e[2], tuple) else (e[2],)
            fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax,
                  "min": torch.amin}[e[1]]
            pair = self.reduce(lambda t, d: fn(t, dim=d), self.run(e[3]), over)
            return self.canon(pair) if e[1] == "mean" else pair
        if tag == "norm":
            v, axes = self.masked(self.run(e[3]), e[4])
            full = v.expand(*[self.sizes[a] for a in axes])
            fn = torch.softmax if e[1] == "softmax" else torch.log_softmax
            return self.canon((fn(full, dim=axes.index(e[2])), axes))
        if tag == "lse":
            return self.canon(self.reduce(lambda t, d: torch.logsumexp(t, dim=d),
                                          self.masked(self.run(e[2]), e[3]), e[1]))
        if tag == "count":
            b, axes = self.run(e[3])
            count = b.to(torch.float64)
            fn = torch.sum if e[1] == "sum" else torch.mean
            pair = self.reduce(lambda t, d: fn(t, dim=d), (count, axes), e[2])
            return self.canon(pair) if e[1] == "mean" else pair
        if tag == "cast":
            return self.run(e[2])
        if tag == "ifloat":
            v, axes = self.run(e[1])
            return self.canon((v.to(torch.float64) * 0.125, axes))
        if tag == "cmp":
            rhs = self.run(("in", e[3])) if isinstance(e[3], str) else (
                torch.tensor(e[3], dtype=torch.float64), ())
            (a, b), axes = self.join(self.run(("in", e[2])), rhs)
            return _CMP[e[1]](a, b), axes
        if tag == "icmp":
            (a, b), axes = self.join(self.run(e[2]), self.run(e[3]))
            return _CMP[e[1]](a, b), axes
        if tag in ("and", "or"):
            (a, b), axes = self.join(self.run(e[1]), self.run(e[2]))
            return (torch.logical_and if tag == "and" else torch.logical_or)(a, b), axes
        if tag == "not":
            v, axes = self.run(e[1])
            return torch.logical_not(v), axes           # unary: keeps its operand's order
        if tag in ("iop", "ishift"):
            rhs = (torch.tensor(e[3]), ()) if tag == "ishift" else self.run(e[3])
            (a, b), axes = self.join(self.run(e[2]), rhs)
            return _INT_OPS[e[1]](a, b), axes
        if tag == "iota":
            return torch.arange(self.sizes[e[1]]), (e[1],)
        if tag == "iconst":
            return torch.tensor(e[1]), ()
        raise ValueError(f"unknown expression {tag!r}")

    def outputs(self):
        """{out0: tensor, ...} over each output's axes (its permutation, else canonical)."""
        out = {}
        outs = self.outs
        for i, (e, perm) in enumerate(outs):
            v, axes = self.run(e)
            target = tuple(perm) if perm else axes
            v = v.expand(*[self.sizes[a] for a in axes]) if axes else v
            out[f"out{i}" if len(outs) > 1 else "out"] = self.view(v, axes, target)
        return out


def _nonzero(b):
    return torch.where(b == 0, torch.ones_like(b), b)


# plait's answer for a zero divisor is 0 (torch raises on the CPU)
_INT_OPS = {
    "floor_divide": lambda a, b: torch.where(
        b == 0, 0, torch.div(a, _nonzero(b), rounding_mode="floor")),
    "remainder": lambda a, b: torch.where(b == 0, 0, torch.remainder(a, _nonzero(b))),
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor, "left_shift": torch.bitwise_left_shift,
    "right_shift": torch.bitwise_right_shift,
}


def run_program(structure, leaves: dict, sizes: dict) -> dict:
    """The outputs of `structure` on torch `leaves` (float64 / bool / int64 by input)."""
    return Interp(structure, leaves, sizes).outputs()


def leaves_from(structure, inputs: dict, requires_grad=False) -> dict:
    """Torch tensors of numpy inputs: floats as float64 (leaves of autograd if asked)."""
    params = dict(structure[0])
    out = {}
    for name, (_, kind) in params.items():
        array = inputs[name]
        if kind == "f":
            t = torch.tensor(array.astype("float64"), dtype=torch.float64)
            out[name] = t.requires_grad_(requires_grad)
        elif kind == "b":
            out[name] = torch.tensor(array.astype(bool))
        else:
            out[name] = torch.tensor(array.astype("int64"))
    return out
