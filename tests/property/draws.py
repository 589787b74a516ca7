"""Shapes, schedules and inputs for the random programs of programs.py.

Shapes are odd (1 and primes are common, rarely a multiple of a tile) and sometimes one
axis is long, so that a reduction over it is split across blocks (a column reduction
takes 64 rows a block by default; a schedule may grid any axis, reduced ones included).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from grammar import POW2
from known_bugs import EXCLUDED
from programs import axes_of, bools, floats, input_dtypes, programs

FLOATS = ("fp32", "bf16", "fp16")
LONG = (65, 127, 200, 301)     # past one block's 64 rows: the reduction is split


@dataclass(frozen=True)
class Case:
    """One fuzz case: everything needed to rebuild it (and print it as a reproducer)."""
    structure: tuple
    sizes: dict
    dtype: object                 # a DType name for every float input, or {name: name}
    seed: int
    schedule: dict | None = None

    def dtypes(self):
        return input_dtypes(self.structure, self.dtype)


def extremes(structure) -> bool:
    """Whether the program reduces by max or min (their gradients compare with the max)."""
    return "('red', 'max'" in repr(structure) or "('red', 'min'" in repr(structure)


def axes_in(structure):
    return sorted({a for _, (axes, _) in structure[0] for a in axes})


@st.composite
def sizes_st(draw, axes, small=False):
    """Extents 1..23 (9 for gradients, whose programs are larger), one axis sometimes long."""
    top = 9 if small else 23
    sizes = {a: draw(st.sampled_from((1, 2, 3, 5, 7)) | st.integers(1, top)) for a in axes}
    if draw(st.integers(0, 3)) == 0:
        sizes[draw(st.sampled_from(axes))] = draw(st.sampled_from(LONG))
    return sizes


@st.composite
def schedules_st(draw, axes):
    """A schedule over the program's axes: threads and a vector width on one axis, maybe
    a row axis, grid tiles on any axes (a tile on a reduced axis splits the reduction).
    The lowering may refuse it; the case then runs with the default schedule."""
    inner = draw(st.sampled_from(axes))
    threads = draw(st.sampled_from(POW2[:4]))
    block = {inner: {"threads": threads, "vector": draw(st.sampled_from((1, 2, 4, 8)))}}
    rest = [a for a in axes if a != inner]
    if rest and threads <= 256 and draw(st.booleans()):
        block[draw(st.sampled_from(rest))] = {"threads": draw(st.sampled_from((1, 2, 4)))}
    grid = {a: draw(st.sampled_from((1, 2, 3, 7, 16, 64))) for a in axes
            if draw(st.booleans())}
    return {"block": block, **({"grid": grid} if grid else {})}


@st.composite
def cases(draw, grad=False, scheduled=True, dtypes=FLOATS):
    structure = draw(programs(grad=grad))
    axes = axes_in(structure)
    sizes = draw(sizes_st(axes, small=grad))
    floats = [n for n, (_, k) in structure[0] if k == "f"]
    if draw(st.integers(0, 3)) == 0:        # mixed precision inputs
        dtype = {n: draw(st.sampled_from(dtypes)) for n in floats}
    else:
        dtype = draw(st.sampled_from(dtypes))
    # A drawn schedule only at short extents: the CPU executor's work grows with
    # blocks x threads x vector, not with the problem (issue 31), and a long axis
    # under a 1024-thread block costs minutes.
    long = max(sizes.values()) > 23
    if grad and extremes(structure) and "split_extreme_grad_lowp" in EXCLUDED:
        dtype = "fp32"   # a gradient program may split any reduction (a tile of 1 row)
    schedule = draw(st.none() | schedules_st(axes)) if scheduled and not long else None
    return Case(structure, sizes, dtype, draw(st.integers(0, 2**16)), schedule)


def make_inputs(case, inf_rows=False):
    """Inputs of the case's dtypes: normal floats, fair bools, ints in [0, largest extent]
    (a length to compare index() with). With inf_rows, some float rows hold -inf or +inf."""
    rng = np.random.default_rng(case.seed)
    top = max(case.sizes.values())
    out = {}
    for name, (axes, kind) in case.structure[0]:
        shape = tuple(case.sizes[a] for a in axes)
        if kind == "b":
            out[name] = rng.random(shape) < 0.5
        elif kind == "i":
            out[name] = rng.integers(0, top + 1, shape).astype(np.int32)
        else:
            v = rng.standard_normal(shape)
            if inf_rows and v.size:
                v[rng.random(shape) < 0.2] = rng.choice([-np.inf, np.inf])
            out[name] = v.astype(np.float32).astype(case.dtypes()[name].numpy)
    return out


@st.composite
def split_cases(draw, ops=("sum", "mean", "max", "min", "lse", "count"), grad=False,
                dtypes=FLOATS, how=("long", "grid")):
    """A program whose first output reduces over an axis long enough (or gridded finely
    enough) that the reduction is split across blocks and finished by a second kernel."""
    if "bool_sum" in EXCLUDED:
        ops = tuple(o for o in ops if o != "count")
    case = draw(cases(grad=grad, scheduled=False, dtypes=dtypes))
    params, outs = case.structure
    env = dict(params)
    axes = axes_in(case.structure)
    op = draw(st.sampled_from(ops))
    inner = draw(bools(env, axes, 1) if op == "count" else floats(env, axes, 1))
    present = sorted(axes_of(inner, env))
    if not present:
        inner, present = ("in", "x0"), sorted(env["x0"][0])
    axis = draw(st.sampled_from(present))
    e = (("count", "sum", (axis,), inner) if op == "count" else
         ("lse", (axis,), inner, None) if op == "lse" else ("red", op, (axis,), inner))
    sizes = dict(case.sizes)
    schedule = None
    if draw(st.sampled_from(how)) == "long":
        sizes[axis] = draw(st.sampled_from(LONG))
        for a in axes:                       # the rest short: the executor's time
            if a != axis:
                sizes[a] = min(sizes[a], 9)
    else:                                    # short, but gridded: tiles of 1..3 rows
        sizes = {a: min(n, 23) for a, n in sizes.items()}
        # the block's threads on another axis: a block walks its 1..3 rows of `axis`
        others = [a for a in axes if a != axis]
        schedule = {"grid": {axis: draw(st.sampled_from((1, 2, 3)))},
                    "block": {draw(st.sampled_from(others)): {"threads": 32}}}
    return Case((params, ((e, None),) + outs[1:]), sizes, case.dtype, case.seed, schedule)
