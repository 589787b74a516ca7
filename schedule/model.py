"""The schedule model: how one algorithm's kernels map onto a GPU.

The YAML form and the Python form are the same objects: `Schedule.from_dict`
accepts exactly what a YAML file holds, and `to_dict` gives it back.

    algorithm: layernorm
    grid:  {M: 1}                          # axes spread over the grid, with the tile per block
    block: {N: {threads: 256, vector: 8}}  # how a block's threads spread along an axis
    dtypes: {storage: bf16, compute: fp32, accumulate: fp32}
    kernels:                               # per-kernel overrides, keyed by kernel name
      dw: {grid: {M: 64}, block: {M: {threads: 4}, N: {threads: 64, vector: 4}}}
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from plait.dsl.dtypes import DType, dtype_of

from .contraction import ContractionSchedule
from .kernel_names import key_candidates


@dataclass(frozen=True)
class AxisBlock:
    """Threads of a block laid along one axis, each taking `vector` adjacent elements."""
    threads: int = 1
    vector: int = 1

    def to_dict(self) -> dict:
        out = {"threads": self.threads}
        if self.vector != 1:
            out["vector"] = self.vector
        return out


@dataclass(frozen=True)
class DTypePolicy:
    """Storage dtype per tensor name ('default' for the rest), compute and accumulate dtypes.

    Absent entries mean: storage as the arrays come, compute and accumulate in fp32.
    """
    storage: tuple[tuple[str, DType], ...] = ()
    compute: DType | None = None
    accumulate: DType | None = None

    def __post_init__(self):
        # One order for the storage table, so that equal policies compare equal
        # however they were built (YAML, Python, by hand).
        object.__setattr__(self, "storage", tuple(sorted(self.storage)))

    def storage_of(self, name: str) -> DType | None:
        table = dict(self.storage)
        return table.get(name, table.get("default"))

    def to_dict(self) -> dict:
        out: dict = {}
        if self.storage:
            table = dict(self.storage)
            out["storage"] = (table["default"].short if list(table) == ["default"]
                              else {k: v.short for k, v in self.storage})
        if self.compute is not None:
            out["compute"] = self.compute.short
        if self.accumulate is not None:
            out["accumulate"] = self.accumulate.short
        return out

    @staticmethod
    def from_dict(d: dict | None) -> "DTypePolicy":
        d = d or {}
        storage = d.get("storage")
        if storage is None:
            pairs: tuple = ()
        elif isinstance(storage, (str, DType)):
            pairs = (("default", dtype_of(storage)),)
        else:
            pairs = tuple(sorted((k, dtype_of(v)) for k, v in storage.items()))
        comp = d.get("compute")
        acc = d.get("accumulate")
        return DTypePolicy(pairs, dtype_of(comp) if comp else None,
                           dtype_of(acc) if acc else None)


@dataclass(frozen=True)
class KernelSchedule:
    """The mapping of one kernel.

    grid: axis -> tile, the elements of that axis one block covers; an axis of
      the kernel absent from grid is covered whole by each block. An axis the block
      walks (no threads) may say `wave`: as many indices each as spread the axis over
      one block per SM.
    block: axis -> AxisBlock; at most two axes (a row axis and the innermost,
      contiguous axis); thread counts are powers of two, 32..1024 in total.
    warps: optional cross-check of the total thread count (threads / 32).
    reduction: how a sum over a grid axis is finished: 'two_stage' or 'atomic'; None is
      the compiler's choice (two_stage; for a streamed sum over the rows of another
      streamed kernel, attention's dq, the target table's `sums_accumulate`). On that
      sum, 'atomic' accumulates it in the other kernel's loop (dq added per key tile
      into an fp32 buffer by the dk/dv kernel), 'two_stage' gives it its own loop.
    occupancy: blocks per SM the compiler must leave room for (it caps registers
      per thread accordingly: ptxas' .minnctapersm); None lets ptxas choose.
    cache_hints: loads of data read once ask the caches to evict it first, and loads of
      data every block rereads (a weight row) to keep it (PTX eviction priorities). Off
      by default: on the H200 it cost 1-4% on rmsnorm, softmax and swiglu (2026-12-02).
    prefetch: for a kernel whose block walks an axis (a grid tile over an axis without
      threads), how many steps ahead its loads are issued: the rows in flight while one
      is computed. 1 by default; 0 loads each row at its own step.
    prefetch_into: where the rows in flight wait: 'registers' (the default; each step
      ahead holds another row in registers) or 'shared' (cp.async copies into a ring of
      prefetch + 1 rows in shared memory, which costs no registers, so deep prefetching
      leaves room for the accumulators).
    save: names of forward intermediates a gradient kernel reads back instead
      of recomputing (autodiff).
    contraction: the tensor-core mapping of a kernel that is a contraction
      (`schedule/contraction.py`); None lets the target's default choose.
    stream: a softmax-weighted contraction (attention's `sum(softmax(s, over=T) * v,
      over=T)`) walked along T in tiles, carrying running max, sum and accumulator (online
      softmax): `{T: 64}` streams T 64 at a time; False keeps the scores in memory; None
      streams where the kernel has that shape, with the target's default tile.
    """
    grid: tuple[tuple[str, int | str], ...] = ()
    block: tuple[tuple[str, AxisBlock], ...] = ()
    warps: int | None = None
    reduction: str | None = None
    save: tuple[str, ...] = ()
    occupancy: int | None = None
    cache_hints: bool = False
    contraction: ContractionSchedule | None = None
    prefetch: int | None = None
    prefetch_into: str | None = None
    stream: tuple[tuple[str, int], ...] | bool | None = None

    @property
    def grid_tiles(self) -> dict[str, int]:
        return dict(self.grid)

    @property
    def block_axes(self) -> dict[str, AxisBlock]:
        return dict(self.block)

    @property
    def threads(self) -> int:
        total = 1
        for _, ab in self.block:
            total *= ab.threads
        return total

    def to_dict(self) -> dict:
        out: dict = {}
        if self.grid:
            out["grid"] = dict(self.grid)
        if self.block:
            out["block"] = {k: v.to_dict() for k, v in self.block}
        if self.warps is not None:
            out["warps"] = self.warps
        if self.reduction is not None:
            out["reduction"] = self.reduction
        if self.save:
            out["save"] = list(self.save)
        if self.occupancy is not None:
            out["occupancy"] = self.occupancy
        if self.cache_hints:
            out["cache_hints"] = True
        if self.contraction is not None:
            out["contraction"] = self.contraction.to_dict()
        if self.prefetch is not None:
            out["prefetch"] = self.prefetch
        if self.prefetch_into is not None:
            out["prefetch_into"] = self.prefetch_into
        if self.stream is not None:
            out["stream"] = dict(self.stream) if self.stream else False
        return out

    @staticmethod
    def from_dict(d: dict | None) -> "KernelSchedule":
        d = d or {}
        block = []
        for axis, spec in (d.get("block") or {}).items():
            spec = spec if isinstance(spec, dict) else {"threads": spec}
            block.append((axis, AxisBlock(int(spec.get("threads", 1)), int(spec.get("vector", 1)))))
        return KernelSchedule(
            grid=tuple((k, v if v == WAVE else int(v)) for k, v in (d.get("grid") or {}).items()),
            block=tuple(block),
            warps=None if d.get("warps") is None else int(d["warps"]),
            reduction=d.get("reduction"),
            save=tuple(d.get("save") or ()),
            occupancy=None if d.get("occupancy") is None else int(d["occupancy"]),
            cache_hints=bool(d.get("cache_hints", False)),
            contraction=ContractionSchedule.from_dict(d.get("contraction")),
            prefetch=None if d.get("prefetch") is None else int(d["prefetch"]),
            prefetch_into=d.get("prefetch_into"),
            stream=_stream(d.get("stream")),
        )

    def merged(self, override: "KernelSchedule") -> "KernelSchedule":
        """This schedule with every field the override sets replaced."""
        return replace(
            self,
            grid=override.grid or self.grid,
            block=override.block or self.block,
            warps=override.warps if override.warps is not None else self.warps,
            reduction=override.reduction if override.reduction is not None else self.reduction,
            save=override.save or self.save,
            occupancy=override.occupancy if override.occupancy is not None else self.occupancy,
            cache_hints=self.cache_hints or override.cache_hints,
            contraction=(override.contraction if self.contraction is None
                         else self.contraction.merged(override.contraction)),
            prefetch=override.prefetch if override.prefetch is not None else self.prefetch,
            prefetch_into=override.prefetch_into or self.prefetch_into,
            stream=override.stream if override.stream is not None else self.stream,
        )


def _stream(value) -> tuple[tuple[str, int], ...] | bool | None:
    """The `stream:` key read (the schema has checked it): None, False, or (axis, tile)."""
    if value is None:
        return None
    if value is False or value == {}:
        return False
    return tuple((axis, int(tile)) for axis, tile in value.items())


# A grid tile spelled `wave`: the walked axis spread over one wave of blocks, one per SM
# (ceil(extent / SMs) indices each), resolved when the sizes are known.
WAVE = "wave"

KERNEL_KEYS = ("grid", "block", "warps", "reduction", "save", "occupancy", "cache_hints",
               "contraction", "prefetch", "prefetch_into", "stream")
TOP_KEYS = ("algorithm", "target", "dtypes", "kernels") + KERNEL_KEYS


@dataclass(frozen=True)
class Schedule:
    """All kernels of one algorithm: a default mapping, per-kernel overrides, a dtype policy.

    `source` (the file it came from) and `lines` (key path like 'block.N.threads'
    -> line in that file) only serve error messages; they take no part in equality.
    """
    algorithm: str
    target: str | None = None
    default: KernelSchedule = field(default_factory=KernelSchedule)
    kernels: tuple[tuple[str, KernelSchedule], ...] = ()
    dtypes: DTypePolicy = field(default_factory=DTypePolicy)
    source: str | None = field(default=None, compare=False)
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def for_kernel(self, name: str) -> KernelSchedule:
        """The mapping of kernel `name` ('layernorm.bwd.dx' matches key 'dx' or the full name)."""
        table = dict(self.kernels)
        for key in key_candidates(name, self.algorithm):
            if key in table:
                return self.default.merged(table[key])
        return self.default

    def has_entry(self, name: str) -> bool:
        """Whether kernel `name` has its own entry under `kernels:`."""
        return any(key in dict(self.kernels) for key in key_candidates(name, self.algorithm))

    def key_path(self, name: str, path: str) -> str:
        """Where kernel `name` takes `path` ('block.N') from: its `kernels:` entry when that
        sets the key ('kernels.dx.block.N'), else the top level; for error messages."""
        table = dict(self.kernels)
        field_name = path.split(".")[0]
        for key in key_candidates(name, self.algorithm):
            if key in table and getattr(table[key], field_name, None) not in (None, (), False):
                return f"kernels.{key}.{path}"
        return path

    def to_dict(self) -> dict:
        out: dict = {"algorithm": self.algorithm}
        if self.target:
            out["target"] = self.target
        out.update(self.default.to_dict())
        if self.kernels:
            out["kernels"] = {k: v.to_dict() for k, v in self.kernels}
        dt = self.dtypes.to_dict()
        if dt:
            out["dtypes"] = dt
        return out

    def to_yaml(self) -> str:
        """The YAML form (deterministic; `parse_schedule` reads it back equal)."""
        from .dump import dump_schedule
        return dump_schedule(self)

    def to_python(self) -> str:
        """Python source that rebuilds this schedule as `schedule = Schedule.from_dict(...)`."""
        from .dump import to_python
        return to_python(self)

    @staticmethod
    def from_dict(d: dict, source: str | None = None,
                  lines: Mapping[str, int] | None = None) -> "Schedule":
        """The schedule a YAML file or a Python dict holds; ScheduleError names each bad key."""
        from .schema import check_dict
        check_dict(d, source, lines)
        return Schedule(
            algorithm=str(d["algorithm"]),
            target=d.get("target"),
            default=KernelSchedule.from_dict({k: d[k] for k in KERNEL_KEYS if k in d}),
            kernels=tuple((k, KernelSchedule.from_dict(v))
                          for k, v in (d.get("kernels") or {}).items()),
            dtypes=DTypePolicy.from_dict(d.get("dtypes")),
            source=source,
            lines=lines or {},
        )
