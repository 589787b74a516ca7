"""A tensor-core program (tc_programs.py) as torch float64 ops: the independent meaning its
gradients are checked against (torch autograd). Nothing here calls plait: each tensor
is permuted to the output's axes by name and broadcast, and each op is torch's own."""
from __future__ import annotations

import torch

from torch_interp import _BINARY, _UNARY

GEMM_OUT = ("B", "M", "N")
SCORES = ("B", "H", "G", "R", "S", "T")


def _over(t, axes, target, sizes):
    """`t` (dims in `axes` order) over `target`'s dims, size 1 where it has none."""
    t = t.permute(*[axes.index(a) for a in target if a in axes])
    return t.reshape([sizes[a] if a in axes else 1 for a in target])


def _position(axis, target, sizes):
    shape = [sizes[a] if a == axis else 1 for a in target]
    return torch.arange(sizes[axis], dtype=torch.float64).reshape(shape)


def _trace(tree, acc, env, target, sizes):
    kind = tree[0]
    if kind == "acc":
        return acc
    if kind == "un":
        return _UNARY[tree[1]](_trace(tree[2], acc, env, target, sizes))
    if kind == "bin":
        v = _trace(tree[2], acc, env, target, sizes)
        leaf = tree[3]
        w = env[leaf[1]] if leaf[0] == "t" else torch.tensor(leaf[1], dtype=torch.float64) \
            if leaf[0] == "c" else _position(leaf[1], target, sizes)
        if tree[1] == "where":
            return torch.where(w > 0, v, w)
        return _BINARY[tree[1]](v, w)
    _, cond, inner, fill = tree
    if cond[0] == "t":
        keep = env[cond[1]]
    elif cond[0] == "same":
        keep = env[cond[1]] == env[cond[2]]
    else:
        s, t = _position("S", target, sizes), _position("T", target, sizes)
        keep = (t <= s) if cond[1] == "causal" else (t <= s) & (s - t < 7)
    return torch.where(keep, _trace(inner, acc, env, target, sizes),
                       torch.tensor(fill, dtype=torch.float64))


def run(case, leaves: dict):
    """The program's output (float64) from torch tensors `leaves` by name."""
    sizes = case.sizes
    target = tuple(a for a in (GEMM_OUT if case.kind == "gemm" else SCORES) if a in sizes)
    axes = {**dict(case.operands), **{n: a for n, a, _ in case.extra}}
    env = {n: _over(leaves[n], axes[n], target, sizes) for n, _, _ in case.extra}
    if case.kind == "gemm":
        a = _over(leaves["a"], axes["a"], target[:-1] + ("K",), sizes)
        b = _over(leaves["b"], axes["b"], target[:-2] + ("N", "K"), sizes)
        acc = torch.matmul(a, b.transpose(-1, -2))
        return _trace(case.tree, acc, env, target, sizes)
    q, k, v = leaves["q"], leaves["k"], leaves["v"]
    if "R" in axes["q"]:             # a group's k and v serve its R query heads
        k, v = k.unsqueeze(2), v.unsqueeze(2)
    scores = torch.matmul(q, k.transpose(-1, -2)) * 0.125
    p = torch.softmax(_trace(case.tree, scores, env, target, sizes), dim=-1)
    return torch.matmul(p, v)
