"""Contraction kernels on tensor cores: matching a tile program and planning its GEMM.

A kernel whose tile program is one `sum(x * y, over=K)` of two loaded operands,
followed only by elementwise ops and one store, is a GEMM with an epilogue:

    %a = load a[M,K]   %b = load b[K,N]   (converts to fp32 registers)
    %p = mul %a' %b'   %s = sum %p axis=K
    ... elementwise ops on %s, loads of [M]/[N]/[M,N] tensors, params ...
    store out[M,N]

`plan_gemm` checks that the target's tensor-core instruction can take it
(dtypes, storage orders, tile shapes, shared memory) and returns a
`GemmProgram`: operands, roles, tiles and the contraction as a loop tile
program (`tileir/tile_contraction.py`), whose epilogue `gemm.sm90` and
`gemm.sm80` compile and whose whole loop `cpu/stream_emulate` runs on the CPU. Operands are
assigned so that the output's contiguous axis is the N role (D^T = B^T A^T).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.node import OPS
from plait.schedule.contraction import ContractionSchedule

from ..artifact import Buffer
from ..target import get_target
from ..tileir.tile import TileOp, TileProgram, format_op
from ..tileir.tile_contraction import contraction_program
from .tiles import TILERS, NotAGemm  # noqa: F401  (NotAGemm: the pipeline catches it here)


CHUNK = 16                      # bytes of shared memory one copy step fills


def access_width(buffer, sizes: dict[str, int], aligned: bool) -> int:
    """Bytes of the widest global access that every 16-byte chunk of `buffer` is aligned
    to: 16 when rows are whole 16-byte units and the base is 16-byte aligned, else the
    largest power of two dividing the row pitch (the element size when the base's
    alignment is unknown). Plain arithmetic, here so that planning loads no LLVM."""
    es = buffer.dtype.itemsize
    if not aligned:
        return es
    if len(buffer.axes) < 2:
        return CHUNK
    return gcd(CHUNK, sizes[buffer.axes[-1]] * es)

WGMMA_TYPES = {DType.BF16: "bf16", DType.FP16: "f16", DType.FP8_E4M3: "e4m3",
               DType.FP8_E5M2: "e5m2", DType.FP32: "tf32"}


@dataclass(frozen=True)
class Operand:
    buffer: Buffer
    k_major: bool              # K is the innermost (contiguous) axis of its storage

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


@dataclass(frozen=True)
class GemmProgram:
    name: str
    target: str
    instruction: str           # 'wgmma' (sm_90a) | 'mma_sync' (sm_80 and later)
    m: str
    n: str
    k: str
    batch: tuple[str, ...]
    a: Operand                 # the operand over M and K
    b: Operand                 # over N and K
    out: Buffer
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    consumers: int             # wgmma: consumer warpgroups (tile_m / 64 rows each), plus a
                               # producer; mma_sync: warps
    raster: int
    program: TileProgram           # the loop over K tiles with its dot, then the epilogue
                                   # (tileir/tile_contraction.py)
    buffers: tuple[Buffer, ...]    # kernel-argument order: operands, epilogue reads, output
    scalars: tuple[tuple[str, DType], ...]
    persistent: bool = False       # one block per SM walks the tiles
    split: str | None = None       # split-K: the output's axis of K ranges, each
    split_chunk: int = 0           # split_chunk elements long (a multiple of tile_k)
    # Widest global access (bytes) each of A, B and the output is aligned to
    # (access_width below): 16 lets wgmma use the TMA and mma_sync 16-byte cp.async;
    # narrower rows are copied by threads in pieces, and the output stored from registers.
    a_access: int = 16
    b_access: int = 16
    out_access: int = 16

    def uses_tma(self, which: str) -> bool:
        """Whether the wgmma kernel moves operand 'a' | 'b' | 'out' with the TMA."""
        return self.instruction == "wgmma" and getattr(self, f"{which}_access") == 16

    @property
    def outer_axes(self) -> tuple[str, ...]:
        """Axes of whole tiles besides M and N: batch axes, then the split-K axis."""
        return self.batch + ((self.split,) if self.split else ())

    @property
    def threads(self) -> int:
        if self.instruction == "wgmma":
            return 128 * (self.consumers + 1)
        return 32 * self.consumers

    @property
    def stage_bytes(self) -> int:
        return (self.tile_m + self.tile_n) * self.tile_k * self.a.dtype.itemsize

    @property
    def out_bytes(self) -> int:
        return self.tile_m * self.tile_n * self.out.dtype.itemsize

    @property
    def shared_bytes(self) -> int:
        if self.instruction == "mma_sync":     # the stages only: no barriers, stores from
            return self.stages * self.stage_bytes   # registers, the base aligned by .align
        # Stages, then the output tile (which reuses the stages once the loop is done,
        # unless the block goes on to another tile), then 2 mbarriers per stage; 1 KiB of
        # slack to align the base to 1024.
        stages = self.stages * self.stage_bytes
        tiles = stages + self.out_bytes if self.persistent else max(stages, self.out_bytes)
        return 1024 + tiles + 16 * self.stages

    @property
    def grid(self) -> tuple[tuple[str, int], ...]:
        return ((self.m, self.tile_m), (self.n, self.tile_n)) + tuple(
            (a, 1) for a in self.outer_axes)

    @property
    def size_args(self) -> tuple[str, ...]:
        names = {self.m, self.n, self.k, *self.outer_axes}
        for b in self.buffers:
            names.update(b.axes)
        return tuple(sorted(names))

    def text(self) -> str:
        def operand(o: Operand):
            return f"{o.buffer.name}:{o.dtype}[{','.join(o.buffer.axes)}] " \
                   f"{'K' if o.k_major else 'MN'}-major"
        lines = [f"gemm program {self.name} on {self.target} ({self.instruction}): "
                 f"[{self.m}] x [{self.n}] over "
                 f"{self.k}" + (f" batch [{','.join(self.batch)}]" if self.batch else "")
                 + (f" split-K along {self.split} by {self.split_chunk}" if self.split else ""),
                 f"  A {operand(self.a)}; B {operand(self.b)}; out {self.out.name}:"
                 f"{self.out.dtype}[{','.join(self.out.axes)}]",
                 f"  access A {self.a_access} B {self.b_access} out {self.out_access} bytes",
                 f"  tile {self.tile_m}x{self.tile_n}x{self.tile_k} stages {self.stages} "
                 f"{'consumers' if self.instruction == 'wgmma' else 'warps'} {self.consumers} "
                 f"raster {self.raster}{' persistent' if self.persistent else ''} "
                 f"threads {self.threads} "
                 f"shared {self.shared_bytes} bytes"]
        lines += [format_op(op) for op in self.program.ops]
        return "\n".join(lines) + "\n"


def _exactly_in(src: DType, dst: DType) -> bool:
    """Whether every src value is a dst value (a round to dst is then no rounding): fp8 in
    fp16 and bf16 (e4m3 and e5m2 exponents fit both), any narrow float in fp32."""
    return src == dst or dst == DType.FP32 or (src.bits == 8 and dst.bits == 16)


def _chain(ops: dict[int, TileOp], vid: int) -> tuple[TileOp, list[int], list[int]]:
    """Follow an operand back to its load through converts, no-op rounds and products with
    scalars: (the load, the ops passed, the scalar factors). A sum is linear, so the
    factors move to the epilogue: sum((s * a) * b) = s * sum(a * b)."""
    seen, factors = [], []
    op = ops[vid]
    while op.op in ("convert", "round", "mul"):
        if op.op == "round":
            src = ops[op.args[0]]
            if not (src.op == "convert" and ops[src.args[0]].op == "load"
                    and _exactly_in(ops[src.args[0]].dtype, op.attr("round"))):
                raise NotAGemm(f"operand %{vid} is rounded to {op.attr('round')} on the way "
                               "to the product; tensor cores read operands as stored")
        nxt = op.args[0]
        if op.op == "mul":
            scalars = [a for a in op.args if not ops[a].axes]
            if len(scalars) != 1 or op.attr("round") is not None:
                break
            factors.append(scalars[0])
            nxt = [a for a in op.args if a != scalars[0]][0]
        seen.append(op.id)
        op = ops[nxt]
    if op.op != "load":
        raise NotAGemm(f"operand %{vid} is computed ({op.op}), not loaded; tensor cores "
                       "read operands from memory")
    return op, seen + [op.id], factors


def match(tile: TileProgram) -> tuple[TileOp, TileOp, TileOp, set[int], tuple[int, ...]]:
    """(sum op, load of x, load of y, ids of the operand chains, scalar factors) or
    NotAGemm."""
    ops = {op.id: op for op in tile.ops}
    rotated = [op.attr("buffer") for op in tile.ops if op.attr("rotate") is not None]
    if rotated:    # operands and epilogue reads are plain tiles of memory
        raise NotAGemm(f"the kernel reads {rotated[0]} rotated (rotate_half)")
    masks = [op.attr("buffer") for op in tile.ops if op.attr("blocks")]
    if masks:
        raise NotAGemm(f"the kernel reads {masks[0]} by blocks (blocked)")
    reductions = [op for op in tile.ops if op.op in OPS and OPS[op.op].kind == "reduce"]
    if len(reductions) != 1 or reductions[0].op != "sum":
        raise NotAGemm("not exactly one sum in the kernel")
    total = reductions[0]
    prod = ops[total.args[0]]
    if prod.op != "mul":
        raise NotAGemm("the sum is not of a product")
    if prod.attr("round") is not None:
        raise NotAGemm(f"compute {prod.attr('round')} rounds every product before the sum; "
                       "tensor cores keep products exact (use compute: fp32)")
    x, xs, xf = _chain(ops, prod.args[0])
    y, ys, yf = _chain(ops, prod.args[1])
    chain = set(xs) | set(ys) | {prod.id}
    for op in tile.ops:   # operand values must feed only the product
        if op.id not in chain and op.id != total.id and any(a in chain for a in op.args):
            raise NotAGemm(f"%{op.id} ({op.op}) uses an operand of the product outside it")
    stores = [op for op in tile.ops if op.op == "store"]
    if len(stores) != 1:
        raise NotAGemm("a contraction kernel writes one output")
    return total, x, y, chain, tuple(xf + yf)


def _operand_dtype_problem(a: DType, b: DType, tf32: bool) -> str | None:
    if a == b == DType.FP32:
        return None if tf32 else ("fp32 operands run on tensor cores only as tf32; set "
                                  "contraction.tf32: true to allow it")
    if a in WGMMA_TYPES and b in WGMMA_TYPES and a.bits == b.bits and (a == b or a.bits == 8):
        return None
    return (f"tensor cores multiply bf16 x bf16, fp16 x fp16, fp8 x fp8 (e4m3 and e5m2 mixed) "
            f"or tf32 x tf32, not {a} x {b}")


@dataclass(frozen=True)
class Roles:
    """What the tile program says of a contraction, whatever the target."""
    m: str
    n: str
    k: str
    batch: tuple[str, ...]
    a: Operand
    b: Operand
    out: Buffer
    total: TileOp
    chain: frozenset[int]
    factors: tuple[int, ...]
    split: str | None          # split-K: the axis of K ranges the output has besides
    loads: tuple[TileOp, TileOp]   # the loads of A and B


def find_roles(tile: TileProgram, sizes: dict[str, int]) -> Roles:
    total, x, y, chain, factors = match(tile)
    buffers = {b.name: b for b in tile.buffers}
    k = total.attr("axis")
    store = [op for op in tile.ops if op.op == "store"][0]
    out = buffers[store.attr("buffer")]
    xa, ya = buffers[x.attr("buffer")].axes, buffers[y.attr("buffer")].axes
    batch = tuple(a for a in xa if a in ya and a != k)
    mx = [a for a in xa if a not in ya]
    ny = [a for a in ya if a not in xa]
    if len(mx) != 1 or len(ny) != 1:
        raise NotAGemm(f"operands over [{','.join(xa)}] and [{','.join(ya)}]: one free axis "
                       "each is what tensor cores take")
    split = total.attr("partial")
    if set(out.axes) != {mx[0], ny[0], *batch} | ({split} if split else set()):
        raise NotAGemm(f"the output [{','.join(out.axes)}] is not over the contraction's "
                       "free and batch axes")
    # The output's contiguous axis is N: its rows are what the epilogue writes.
    if out.axes[-1] == mx[0]:
        x, y, mx, ny = y, x, ny, mx
    elif out.axes[-1] != ny[0]:
        raise NotAGemm("the output's innermost axis is a batch or split axis")
    a_buf, b_buf = buffers[x.attr("buffer")], buffers[y.attr("buffer")]
    a = Operand(a_buf, a_buf.axes[-1] == k)
    b = Operand(b_buf, b_buf.axes[-1] == k)
    for o in (a, b):
        if o.buffer.axes[-1] in batch:
            raise NotAGemm(f"{o.buffer.name}'s innermost axis is a batch axis")
    for op in tile.ops:
        if op.op == "load" and op.id not in chain and k in buffers[op.attr("buffer")].axes:
            raise NotAGemm(f"the epilogue reads {op.attr('buffer')} along {k}")
    return Roles(mx[0], ny[0], k, batch, a, b, out, total, frozenset(chain), factors, split,
                 (x, y))


def plan_gemm(tile: TileProgram, sizes: dict[str, int], target: str, aligned: bool,
              schedule: ContractionSchedule | None, derived=(),
              multiprocessors: int | None = None) -> GemmProgram:
    """The GemmProgram for this kernel, NotAGemm when it is no tensor-core contraction
    (or the target has none), PlaitError when the schedule asks for what cannot be.
    `derived`: (axis, elements per index) of the compiler's axes, e.g. split-K ranges;
    `multiprocessors`: the SMs the tiles are chosen to fill (the target's figure if None)."""
    spec = get_target(target)
    sched = spec.contraction.merged(schedule)
    if sched.instruction not in spec.instructions:
        raise PlaitError(f"kernel {tile.name}: contraction.instruction: {sched.instruction} is "
                         f"not available on {target} (it has {', '.join(get_target(target).instructions)})")
    r = find_roles(tile, sizes)
    problem = _operand_dtype_problem(r.a.dtype, r.b.dtype, sched.tf32)
    if problem:
        raise NotAGemm(problem)
    access = [access_width(buf, sizes, aligned) for buf in (r.a.buffer, r.b.buffer, r.out)]
    if r.split and sched.instruction != "wgmma":
        raise NotAGemm(f"split-K is lowered for wgmma only, not {sched.instruction}")
    tiling = TILERS[sched.instruction](r, sched, sizes, f"kernel {tile.name}: contraction",
                                       spec, multiprocessors or spec.sms)
    split_chunk = dict(derived)[r.split] if r.split else 0
    program = contraction_program(tile, r.total, r.loads, r.chain, r.factors, tiling[2],
                                  (r.split, split_chunk) if r.split else None)
    plan = GemmProgram(
        tile.name, target, sched.instruction, r.m, r.n, r.k, r.batch, r.a, r.b, r.out,
        *tiling, sched.raster, program, _argument_order(tile, r.a, r.b, r.out), tile.scalars,
        bool(sched.persistent) and sched.instruction == "wgmma", r.split, split_chunk,
        *access)
    if schedule is None or schedule.stages is None:
        # Stages left to the compiler: as many of the default as fit beside the rest.
        while plan.shared_bytes > spec.shared_per_block and plan.stages > 2:
            plan = replace(plan, stages=plan.stages - 1)
    if plan.shared_bytes > spec.shared_per_block:
        raise PlaitError(f"kernel {tile.name}: contraction: {plan.stages} stages of "
                         f"{plan.stage_bytes} bytes need {plan.shared_bytes} bytes of shared "
                         f"memory; {target} has {spec.shared_per_block} a block")
    return plan


def _argument_order(tile: TileProgram, a: Operand, b: Operand, out: Buffer):
    rest = [buf for buf in tile.buffers if buf.name not in (a.buffer.name, b.buffer.name,
                                                             out.name)]
    return (a.buffer, b.buffer, *rest, out)
