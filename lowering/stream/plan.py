"""The plan of a streamed kernel: its tile program with the tiles and widths fixed.

Plain data (no llvmlite): the pipeline builds it, prints it into the specialization key
and hands it to the backend (`stream/emitter.py`) or the CPU executor (`stream_emulate.py`).

Every streamed kernel has the same frame: a block takes `rows` rows of one batch index
and walks the streamed axis `keys` at a time. Its tensors are tiles of two kinds:
residents, over the rows (q in the forward), copied into shared memory once per block;
and streamed tiles, over the keys (k and v), copied each step into one of two stages.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from plait.dsl.errors import PlaitError

from ..graph.streaming import Stream
from ..target import get_target, streams_on_wgmma
from ..tileir.tile import TileProgram

STAGES = 2                       # streamed tiles in shared memory: one computed, one landing


@dataclass(frozen=True)
class TileOperand:
    """A tensor of a streamed kernel, stored [batch..., axis, width_axis]."""
    name: str
    axis: str                     # the rows (a resident) or the streamed axis
    width_axis: str
    width: int

    @property
    def pad(self) -> int:
        """The width in shared memory and registers: whole tensor-core k steps of 16."""
        return -(-self.width // 16) * 16

    def tile_bytes(self, n_rows: int) -> int:
        return n_rows * self.pad * 2


@dataclass(frozen=True)
class StreamKernel:
    """A streamed tile program with its tiles fixed for the backend."""
    tile: TileProgram
    target: str
    batch: tuple[str, ...]
    rows_axis: str
    keys_axis: str
    rows: int                     # rows per block
    keys: int                     # keys per step
    residents: tuple[TileOperand, ...]
    streamed: tuple[TileOperand, ...]
    outs: tuple[str, ...]
    widths: tuple[tuple[str, int], ...]    # every width axis and its size, compiled in
    row_blocks: int = 1           # 16-row m blocks per warp (each streamed fragment serves all)
    scattered: tuple[str, ...] = ()   # fp32 buffers [batch, keys, width] added into per step
    instruction: str = "mma_sync"     # or "wgmma" (stream/sm90.py; `wgmma_refusal`)

    @property
    def name(self) -> str:
        return self.tile.name

    @property
    def folded(self) -> tuple[str, ...]:
        """Axes the loop walks with the keys, outermost (grouped query heads in dk, dv)."""
        loop = next(op for op in self.tile.ops if op.op == "loop")
        return tuple(loop.attr("fold") or ())

    @property
    def rows_per_warp(self) -> int:
        return 16 * self.row_blocks

    @property
    def warps(self) -> int:
        return self.rows // self.rows_per_warp

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def width(self, axis: str) -> int:
        return dict(self.widths)[axis]

    def pad(self, axis: str) -> int:
        return -(-self.width(axis) // 16) * 16

    def operand(self, name: str) -> TileOperand:
        return next(t for t in self.residents + self.streamed if t.name == name)

    @property
    def residents_in_registers(self) -> bool:
        """The residents' A fragments stay in registers when they take at most 32."""
        return sum(self.row_blocks * (t.pad // 16) * 4 for t in self.residents) <= 32

    def resident_offset(self, name: str) -> int:
        """Byte offset of a resident's tile in shared memory."""
        return _offset(self.residents, name, self.rows)

    def stage_offset(self, name: str) -> int:
        """Byte offset of a streamed tile inside a stage."""
        return _offset(self.streamed, name, self.keys)

    @property
    def resident_bytes(self) -> int:
        return sum(t.tile_bytes(self.rows) for t in self.residents)

    @property
    def stage_bytes(self) -> int:
        return sum(t.tile_bytes(self.keys) for t in self.streamed)

    @property
    def scratch_offset(self) -> int:
        """Where a scattered sum's weights wait, [rows, keys] in the operand dtype: its
        product runs over the rows, which the warps split."""
        return self.resident_bytes + STAGES * self.stage_bytes

    @property
    def scratch_bytes(self) -> int:
        return self.rows * self.keys * 2 if self.scattered else 0

    @property
    def shared_bytes(self) -> int:
        return self.resident_bytes + STAGES * self.stage_bytes + self.scratch_bytes

    @property
    def buffers(self):
        return self.tile.buffers

    @property
    def size_args(self) -> tuple[str, ...]:
        return self.tile.axes

    @property
    def scalars(self):
        return self.tile.scalars

    @property
    def grid(self) -> tuple[tuple[str, int], ...]:
        return self.tile.grid

    def text(self) -> str:
        tiles = lambda ts: ", ".join(f"{t.name}[{t.axis},{t.width_axis}={t.width}]"  # noqa: E731
                                     for t in ts)
        shown = "mma.sync" if self.instruction == "mma_sync" else self.instruction
        return (f"streamed kernel {self.name} ({self.target}, {shown}): {self.rows} rows of "
                f"{self.rows_axis} per block in {self.warps} warps of {self.rows_per_warp}, "
                f"{self.keys_axis} in steps of {self.keys}" +
                "".join(f" for each {a}" for a in self.folded) +
                f"; per block {tiles(self.residents)}, per step {tiles(self.streamed)}; {STAGES} stages, shared "
                f"{self.shared_bytes} bytes" +
                "".join(f"; adds into {n} per step" for n in self.scattered) + "\n" +
                self.tile.text())


def _offset(tiles, name: str, n_rows: int) -> int:
    """Where tile `name` starts among `tiles` laid out one after another, n_rows each."""
    at = 0
    for t in tiles:
        if t.name == name:
            return at
        at += t.tile_bytes(n_rows)
    raise KeyError(name)


def wgmma_refusal(sk: StreamKernel, warps: int | None) -> str | None:
    """Why streamed kernel `sk` cannot run on wgmma (stream/sm90.py), or None: a warpgroup
    takes 64 rows in 4 warps of 16; its operands are 16-bit floats in whole 128-byte
    panels (64 columns); a product is at most 256 wide."""
    if sk.scattered:
        return "its loop adds a product over its rows into memory (mma.sync only)"
    if sk.rows % 64 or (warps is not None and warps != sk.rows // 16):
        return f"{sk.rows} rows per block are not warpgroups of 64 rows in 4 warps"
    if sk.keys % 16 or sk.keys > 256:
        return f"{sk.keys} keys per step are not a wgmma width (16 to 256 by 16)"
    for t in sk.residents + sk.streamed:
        dtype = next(b.dtype for b in sk.tile.buffers if b.name == t.name)
        if dtype.short not in ("bf16", "fp16"):
            return f"{t.name} is {dtype}, not bf16 or fp16"
        if t.pad % 64 or t.pad > 256:
            return f"{t.name}'s width {t.width} is not 64, 128, 192 or 256"
    return None


def plan_stream(tile: TileProgram, plan, sizes: dict[str, int], target: str) -> StreamKernel:
    st = plan.stream
    rows = dict(plan.schedule.grid)[st.rows]
    keys = dict(plan.schedule.stream)[st.keys]
    operand = lambda n, axis: TileOperand(n.attr("name"), axis, n.axes[-1],  # noqa: E731
                                          sizes[n.axes[-1]])
    if isinstance(st, Stream):
        residents = (operand(st.q, st.rows),)
        streamed = (operand(st.k, st.keys),) + ((operand(st.v, st.keys),) if st.v is not None
                                                else ())
        wide = st.v is not None and sizes[st.cols] > 128
        per_warp = 16 if wide or rows % 32 else 32
    else:
        residents = tuple(operand(n, st.rows) for n in st.residents)
        streamed = tuple(operand(n, st.keys) for n in st.streamed)
        per_warp = 16
    scattered = tuple(t.name for t in getattr(st, "scattered", ()))
    warps = plan.schedule.warps or max(1, rows // per_warp)
    if rows % (16 * warps):
        raise PlaitError(f"kernel {plan.name}: {rows} rows per block do not split into "
                         f"{warps} warps of whole 16-row tensor-core tiles")
    widths = {t.width_axis: t.width for t in residents + streamed}
    for name, _ in plan.outputs:
        buf = next(b for b in tile.buffers if b.name == name)
        if buf.axes[-1] not in (st.rows,) + tuple(st.batch):
            widths[buf.axes[-1]] = sizes[buf.axes[-1]]
    sk = StreamKernel(tile, target, st.batch, st.rows, st.keys, rows, keys, residents,
                      streamed, tuple(name for name, _ in plan.outputs
                                      if name not in scattered),
                      tuple(sorted(widths.items())), rows // (16 * warps), scattered)
    widths = tuple(t.width for t in residents + streamed)
    if streams_on_wgmma(get_target(target).instructions, isinstance(st, Stream), widths) and \
            wgmma_refusal(sk, plan.schedule.warps) is None:
        sk = replace(sk, row_blocks=1, instruction="wgmma")
    limit = get_target(target).shared_per_block
    if sk.shared_bytes > limit:
        raise PlaitError(f"kernel {plan.name}: {rows} rows per block and {keys} keys per step "
                         f"take {sk.shared_bytes} bytes of shared memory; {target} has {limit} "
                         f"a block (fewer rows or keys in grid.{st.rows} or stream.{st.keys})")
    return sk
