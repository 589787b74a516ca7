"""The plan of a streamed kernel: its tile program with the tiles and head sizes fixed.

Plain data (no llvmlite): the pipeline builds it, prints it into the specialization key
and hands it to the backend (`stream_sm80.py`) or the CPU executor (`stream_emulate.py`).
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.dsl.errors import PlaitError

from .tile import TileProgram

STAGES = 2                       # k/v tiles in shared memory: one computed, one landing


@dataclass(frozen=True)
class StreamKernel:
    """A streamed tile program with its tiles and head sizes fixed for the backend."""
    tile: TileProgram
    target: str
    batch: tuple[str, ...]
    rows_axis: str
    keys_axis: str
    depth_axis: str
    cols_axis: str
    rows: int                     # query rows per block
    keys: int                     # keys per step
    depth: int                    # D, compiled in
    cols: int                     # E, compiled in
    q: str
    k: str
    v: str
    out: str

    @property
    def name(self) -> str:
        return self.tile.name

    row_blocks: int = 1           # 16-row m blocks per warp (each k, v fragment serves all)

    @property
    def rows_per_warp(self) -> int:
        return 16 * self.row_blocks

    @property
    def warps(self) -> int:
        return self.rows // self.rows_per_warp

    @property
    def q_in_registers(self) -> bool:
        """q's fragments stay in registers when they take at most 32 of them."""
        return self.row_blocks * (self.depth_pad // 16) * 4 <= 32

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def depth_pad(self) -> int:
        return -(-self.depth // 16) * 16

    @property
    def cols_pad(self) -> int:
        return -(-self.cols // 16) * 16

    @property
    def q_bytes(self) -> int:
        return self.rows * self.depth_pad * 2

    @property
    def stage_bytes(self) -> int:
        return self.keys * (self.depth_pad + self.cols_pad) * 2

    @property
    def shared_bytes(self) -> int:
        return self.q_bytes + STAGES * self.stage_bytes

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
        return (f"streamed kernel {self.name} ({self.target}, mma.sync): {self.rows} rows of "
                f"{self.rows_axis} per block in {self.warps} warps of {self.rows_per_warp}, {self.keys_axis} in steps "
                f"of {self.keys}, {self.depth_axis} = {self.depth}, {self.cols_axis} = "
                f"{self.cols}, {STAGES} stages, shared {self.shared_bytes} bytes\n"
                + self.tile.text())


def plan_stream(tile: TileProgram, plan, sizes: dict[str, int], target: str) -> StreamKernel:
    st = plan.stream
    rows = dict(plan.schedule.grid)[st.rows]
    keys = dict(plan.schedule.stream)[st.keys]
    per_warp = 32 if sizes[st.cols] <= 128 and rows % 32 == 0 else 16
    warps = plan.schedule.warps or max(1, rows // per_warp)
    if rows % (16 * warps):
        raise PlaitError(f"kernel {plan.name}: {rows} query rows per block do not split into "
                         f"{warps} warps of whole 16-row tensor-core tiles")
    return StreamKernel(tile, target, st.batch, st.rows, st.keys, st.depth, st.cols, rows,
                        keys, sizes[st.depth], sizes[st.cols], st.q.attr("name"),
                        st.k.attr("name"), st.v.attr("name"), plan.outputs[0][0],
                        rows // (16 * warps))
