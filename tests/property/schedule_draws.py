"""Random schedules over every key, partial ones included, for the algorithms of
grammar.py: what a user may write, valid or not (validation sorts them out).

Values are drawn from sets that mix what the hardware takes with what it does not
(thread counts past 1024 or under a warp, occupancies past an SM, tiles that are no
multiple of the block), so that validation has something to refuse, and kernel names
from what plait prints (stages of a split reduction, short and full forms).
"""
from __future__ import annotations

from hypothesis import strategies as st

THREADS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
VECTORS = (1, 2, 4, 8)
TILES = (1, 2, 3, 7, 16, 32, 64, 128, 256)
CONTRACTION_TILES = (16, 32, 48, 64, 128, 192, 256)
KEYS = ("grid", "block", "warps", "occupancy", "reduction", "prefetch", "prefetch_into",
        "cache_hints")


@st.composite
def kernel_entries(draw, axes, contraction=False):
    """Some keys of one kernel's mapping (none, one, or many)."""
    keys = draw(st.sets(st.sampled_from(KEYS + (("contraction",) if contraction else ())),
                        max_size=4))
    d: dict = {}
    if "grid" in keys:
        d["grid"] = draw(st.dictionaries(st.sampled_from(axes), st.sampled_from(TILES),
                                         min_size=1, max_size=2))
    if "block" in keys:
        d["block"] = draw(st.dictionaries(
            st.sampled_from(axes), st.fixed_dictionaries(
                {"threads": st.sampled_from(THREADS), "vector": st.sampled_from(VECTORS)}),
            min_size=1, max_size=2))
    if "warps" in keys:
        d["warps"] = draw(st.sampled_from((1, 2, 4, 8, 32)))
    if "occupancy" in keys:
        d["occupancy"] = draw(st.sampled_from((1, 2, 3, 4, 8, 16, 32)))
    if "reduction" in keys:
        d["reduction"] = draw(st.sampled_from(("two_stage", "atomic")))
    if "prefetch" in keys:
        d["prefetch"] = draw(st.integers(0, 4))
    if "prefetch_into" in keys:
        d["prefetch_into"] = draw(st.sampled_from(("registers", "shared")))
    if "cache_hints" in keys:
        d["cache_hints"] = draw(st.booleans())
    if "contraction" in keys:
        d["contraction"] = draw(contraction_entries())
    return d


@st.composite
def contraction_entries(draw):
    d: dict = {}
    if draw(st.booleans()):
        d["tile"] = draw(st.dictionaries(st.sampled_from(("M", "N", "K")),
                                         st.sampled_from(CONTRACTION_TILES), min_size=1))
    for key, values in (("stages", (1, 2, 3, 4, 6)), ("warpgroups", (1, 2, 3, 4)),
                        ("instruction", ("wgmma", "mma_sync")), ("split_k", (1, 2, 4)),
                        ("persistent", (True, False))):
        if draw(st.integers(0, 3)) == 0:
            d[key] = draw(st.sampled_from(values))
    return d


def kernel_keys(name: str):
    """Keys naming kernels the way plait prints them, full and short."""
    stages = ("", ".finish", ".then", ".then.finish", ".finish.then")
    return st.sampled_from([name + s for s in stages] + ["finish", "then", "then.finish"])


@st.composite
def any_schedules(draw, name, axes, contraction=False):
    """A schedule dict for algorithm `name` over `axes`: top-level keys and kernels."""
    d = {"algorithm": name, **draw(kernel_entries(axes, contraction))}
    if draw(st.integers(0, 3)) == 0:
        d["kernels"] = draw(st.dictionaries(kernel_keys(name),
                                            kernel_entries(axes, contraction), max_size=2))
    return d
