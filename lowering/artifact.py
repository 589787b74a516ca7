"""What lowering hands the runtime: compiled kernels and the buffers between them.

Plain data (no llvmlite, no CUDA) so that the runtime can cache a Program on
disk as JSON and launch it without importing the compiler.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from plait.dsl.dtypes import DType, dtype_of

from .target import get_target


@dataclass(frozen=True)
class Buffer:
    """A tensor in device memory: an algorithm input, an output, or a temporary.

    Temporaries are allocated by the runtime (zero-filled when `zero` is set,
    as atomic reductions need) and freed after the program runs. Extents are
    the named axes' sizes; pass sizes completed by `Program.complete_sizes`.
    """
    name: str
    dtype: DType
    axes: tuple[str, ...]
    role: str               # 'input' | 'output' | 'temp'
    zero: bool = False

    def shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(sizes[a] for a in self.axes)


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter, in order: a buffer's address, an axis size (int32), a scalar, or
    a tensor map (a TMA descriptor of a buffer, passed by value) copying boxes of `box`."""
    name: str
    kind: str               # 'buffer' | 'size' | 'scalar' | 'tensormap'
    dtype: DType            # element dtype of a buffer; INT32 for sizes; the scalar's dtype
    box: tuple[tuple[str, int], ...] = ()   # tensormap: (axis, box extent), outermost first


@dataclass(frozen=True)
class CompiledKernel:
    name: str               # stable name, e.g. 'layernorm' or 'layernorm.bwd.dx'
    entry: str              # the PTX entry symbol
    target: str             # e.g. 'sm_90a'
    ptx: str
    args: tuple[KernelArg, ...]
    threads: int            # threads per block
    grid: tuple[tuple[str, int], ...]   # blocks = prod(ceil(size[axis] / tile))
    shared_bytes: int = 0   # shared memory per block, all of it
    dynamic_shared: int = 0  # of which dynamic: the launch must ask for this many bytes
    persistent: bool = False  # at most one block per multiprocessor, each walking tiles
    # The innermost grid axis's blocks on x and the other axes' on y (and z, past the
    # target's max_grid_yz of them), so that a block finds its indices without dividing by a
    # run-time count. Otherwise one linear index on x.
    grid_xyz: bool = False

    def blocks(self, sizes: dict[str, int],
               multiprocessors: int | None = None) -> int | tuple[int, int, int]:
        counts = [-(-sizes[axis] // tile) for axis, tile in self.grid]
        if self.grid_xyz and len(counts) > 1:
            return split_grid(counts, get_target(self.target).max_grid_yz)
        total = math.prod(counts)
        if self.persistent and multiprocessors:
            total = min(total, multiprocessors)
        return max(total, 1) if self.persistent else total


def split_grid(counts: list[int], max_yz: int) -> int | tuple[int, int, int]:
    """Launch dimensions for blocks per grid axis (outermost first): the innermost on x,
    the product of the others over y (at most `max_yz`) and z. z > 1 leaves some blocks
    past the end (the kernel returns at once in them); 0 when any axis is empty."""
    rest = math.prod(counts[:-1])
    if rest == 0 or counts[-1] == 0:
        return 0
    y = min(rest, max_yz)
    return counts[-1], y, -(-rest // y)


@dataclass(frozen=True)
class Program:
    """An algorithm compiled for one target and specialization: kernels in launch order."""
    algorithm: str
    target: str
    buffers: tuple[Buffer, ...]
    kernels: tuple[CompiledKernel, ...]
    # Axes the compiler made up (e.g. one row per block of a split reduction):
    # (axis, source axis, tile) means size[axis] = ceil(size[source] / tile).
    derived: tuple[tuple[str, str, int], ...] = ()
    # Axes a rewrite made (a long topk's chunks: graph/topk_split.py), in order:
    # (axis, sources, divisor, multiplier): ceil(product of sources / divisor) * multiplier.
    made: tuple[tuple[str, tuple[str, ...], int, int], ...] = ()

    def complete_sizes(self, sizes: dict[str, int]) -> dict[str, int]:
        """The algorithm's axis sizes plus the derived ones every Buffer and kernel may use."""
        out = dict(sizes)
        for axis, sources, divisor, multiplier in self.made:
            out[axis] = -(-math.prod(out[s] for s in sources) // divisor) * multiplier
        for axis, source, tile in self.derived:
            out[axis] = -(-out[source] // tile)
        return out

    def to_json(self) -> str:
        def enc(o):
            if isinstance(o, DType):
                return o.short
            raise TypeError(type(o))
        return json.dumps(asdict(self), default=enc, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "Program":
        d = json.loads(text)
        buffers = tuple(Buffer(b["name"], dtype_of(b["dtype"]), tuple(b["axes"]), b["role"],
                               b["zero"]) for b in d["buffers"])
        kernels = tuple(
            CompiledKernel(k["name"], k["entry"], k["target"], k["ptx"],
                           tuple(KernelArg(a["name"], a["kind"], dtype_of(a["dtype"]),
                                           tuple((x, int(n)) for x, n in a.get("box", ())))
                                 for a in k["args"]),
                           k["threads"], tuple((g[0], g[1]) for g in k["grid"]),
                           k["shared_bytes"], k.get("dynamic_shared", 0),
                           k.get("persistent", False), k.get("grid_xyz", False))
            for k in d["kernels"])
        derived = tuple((a, s, t) for a, s, t in d.get("derived", ()))
        made = tuple((a, tuple(s), q, m) for a, s, q, m in d.get("made", ()))
        return Program(d["algorithm"], d["target"], buffers, kernels, derived, made)
