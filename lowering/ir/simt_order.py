"""The order in which a SIMT kernel's tile ops are written into the IR: reductions
independent of each other stand together, so the thread-level pass gives them one
exchange (`simt_threads.py`)."""
from __future__ import annotations

from ..graph.kernel_plan import REDUCE_OPS
from ..tileir.tile import TileOp


def cluster_reductions(ops: list[TileOp]) -> list[TileOp]:
    """Reorder so that reductions independent of each other stand together.

    An op's level counts the reductions on its longest path from the inputs. Ops run
    level by level, each level's reductions last, so the derived LayerNorm backward
    reduces sum(dy*w*xc) and sum(xc*xc) in one round (one exchange, two barriers)
    instead of two. Loads keep the place of their first user (registers).
    """
    level: dict[int, int] = {}
    for op in ops:
        level[op.id] = max((level[a] + (ops[a].op in REDUCE_OPS) for a in op.args),
                           default=0)
    users: dict[int, list[int]] = {}
    for op in ops:
        for a in op.args:
            users.setdefault(a, []).append(op.id)
    for op in ops:
        if op.op == "load" and op.id in users:
            level[op.id] = min(level[u] for u in users[op.id])
    # A converted load follows its load.
    for op in ops:
        if op.op == "convert" and op.args and ops[op.args[0]].op == "load":
            level[op.id] = level[op.args[0]]
    return sorted(ops, key=lambda o: (level[o.id], o.op in REDUCE_OPS, o.id))
