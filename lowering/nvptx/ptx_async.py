"""Hopper's asynchronous machinery as inline PTX: mbarriers, the tensor memory accelerator
(TMA), wgmma and the fences between them. LLVM has no intrinsics the NVPTX backend
lowers for all of these, so each is one small asm statement.

Shared-memory addresses are 32-bit offsets in the shared window; a tensor map is the
generic address of a `__grid_constant__` kernel parameter.
"""
from __future__ import annotations

from llvmlite import ir

from . import ops as L

VOID = ir.VoidType()


def _asm(b: ir.IRBuilder, text: str, constraints: str, args: list, ret=VOID, effects=True):
    return b.asm(ir.FunctionType(ret, [a.type for a in args]), text, constraints, args, effects)


# ---- mbarriers ------------------------------------------------------------------------

def mbarrier_init(b, bar, count: int) -> None:
    _asm(b, f"mbarrier.init.shared::cta.b64 [$0], {count};", "r,~{memory}", [bar])


def fence_barrier_init(b) -> None:
    """Make initialised mbarriers visible to the async proxy (TMA) before first use."""
    _asm(b, "fence.mbarrier_init.release.cluster; fence.proxy.async.shared::cta;",
         "~{memory}", [])


def mbarrier_wait(b, bar, parity) -> None:
    """Spin until the barrier's phase of this parity has completed."""
    _asm(b, "{ .reg .pred done; WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1; "
         "@!done bra WAIT; }", "r,r,~{memory}", [bar, parity])


def mbarrier_expect_tx(b, bar, nbytes: int) -> None:
    """Arrive, announcing the bytes the copies on this phase will deliver."""
    _asm(b, f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], {nbytes};", "r,~{memory}",
         [bar])


def mbarrier_arrive_if(b, bar, pred) -> None:
    """One arrival, from the threads where `pred` (i32) is nonzero."""
    _asm(b, "{ .reg .pred p; setp.ne.b32 p, $1, 0; @p mbarrier.arrive.shared::cta.b64 _, [$0]; }",
         "r,r,~{memory}", [bar, pred])


def mbarrier_arrive_on_copies(b, bar) -> None:
    """Arrive once this thread's cp.async copies so far have landed (the barrier's count
    includes this arrival: .noinc)."""
    _asm(b, "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];", "r,~{memory}", [bar])


# ---- the tensor memory accelerator ----------------------------------------------------

def tma_load(b, dst, tmap, coords: list, bar) -> None:
    """Copy one box at `coords` (innermost first) into shared memory; `bar` counts its bytes."""
    n = len(coords)
    cs = ", ".join(f"${i + 2}" for i in range(n))
    _asm(b, f"cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes "
         f"[$0], [$1, {{{cs}}}], [${n + 2}];", ",".join(["r", "l"] + ["r"] * n + ["r"])
         + ",~{memory}", [dst, tmap, *coords, bar])


def tma_store(b, tmap, coords: list, src) -> None:
    n = len(coords)
    cs = ", ".join(f"${i + 1}" for i in range(n))
    _asm(b, f"cp.async.bulk.tensor.{n}d.global.shared::cta.bulk_group [$0, {{{cs}}}], "
         f"[${n + 1}];", ",".join(["l"] + ["r"] * n + ["r"]) + ",~{memory}",
         [tmap, *coords, src])


def tma_store_commit(b) -> None:
    _asm(b, "cp.async.bulk.commit_group;", "~{memory}", [])


def tma_store_wait(b) -> None:
    """Wait until the committed stores have read their shared memory (it may be reused)."""
    _asm(b, "cp.async.bulk.wait_group.read 0;", "~{memory}", [])


def prefetch_tensormap(b, tmap) -> None:
    _asm(b, "prefetch.tensormap [$0];", "l,~{memory}", [tmap])


def fence_async_shared(b) -> None:
    """Ordinary shared-memory stores become visible to the async proxy (TMA, wgmma)."""
    _asm(b, "fence.proxy.async.shared::cta;", "~{memory}", [])


def named_barrier(b, index: int, threads: int) -> None:
    _asm(b, f"bar.sync {index}, {threads};", "~{memory}", [])


def setmaxnreg(b, regs: int, increase: bool) -> None:
    _asm(b, f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 {regs};", "", [])


# ---- wgmma ------------------------------------------------------------------------------

def smem_descriptor(b, addr, lead_bytes: int, stride_bytes: int):
    """The 64-bit wgmma matrix descriptor of a 128-byte-swizzled tile at `addr` (i32)."""
    start = b.lshr(b.and_(b.zext(addr, L.I64), ir.Constant(L.I64, 0x3FFFF)),
                   ir.Constant(L.I64, 4))
    fixed = ((lead_bytes >> 4) << 16) | ((stride_bytes >> 4) << 32) | (1 << 62)
    return b.or_(start, ir.Constant(L.I64, fixed))


def wgmma_fence(b) -> None:
    _asm(b, "wgmma.fence.sync.aligned;", "~{memory}", [])


def wgmma_commit(b) -> None:
    _asm(b, "wgmma.commit_group.sync.aligned;", "~{memory}", [])


def wgmma_wait(b, acc: list, pending: int = 0) -> list:
    """Wait until at most `pending` committed groups are in flight; the accumulators pass
    through the statement so that nothing reads them before it (LLVM sees no other
    dependence on the asynchronous MMA)."""
    n = len(acc)
    ret = ir.LiteralStructType([L.F32] * n)
    cons = ",".join(["=f"] * n + [str(i) for i in range(n)]) + ",~{memory}"
    out = _asm(b, f"wgmma.wait_group.sync.aligned {pending};", cons, acc, ret)
    return [b.extract_value(out, i) for i in range(n)]


def wgmma(b, acc: list, desc_a, desc_b, n: int, k: int, kind: str, kind_b: str,
          trans_a: bool, trans_b: bool) -> list:
    """acc += A(64 x k) B(k x n) from two shared-memory descriptors; fp32 accumulators."""
    count = len(acc)
    ds = ", ".join(f"${i}" for i in range(count))
    flags = ", 1, 1" + (f", {int(trans_a)}, {int(trans_b)}" if kind in ("bf16", "f16") else "")
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${2 * count + 2}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{kind}.{kind_b} {{{ds}}}, "
            f"${2 * count}, ${2 * count + 1}, p{flags}; }}")
    cons = ",".join(["=f"] * count + [str(i) for i in range(count)] + ["l", "l", "r"])
    ret = ir.LiteralStructType([L.F32] * count)
    out = _asm(b, text, cons, [*acc, desc_a, desc_b, L.i32(1)], ret)
    return [b.extract_value(out, i) for i in range(count)]


def wgmma_registers_a(b, acc: list, a: list, desc_b, n: int, kind: str, trans_b: bool) -> list:
    """acc += A(64 x 16) B(16 x n): A from this warpgroup's registers (four 32-bit words of
    16-bit pairs a thread, each warp its 16 rows in mma.sync's m16n8k16 A layout), B from
    a shared-memory descriptor; fp32 accumulators."""
    count = len(acc)
    ds = ", ".join(f"${i}" for i in range(count))
    words = ", ".join(f"${2 * count + i}" for i in range(4))
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${2 * count + 5}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} {{{ds}}}, "
            f"{{{words}}}, ${2 * count + 4}, p, 1, 1, {int(trans_b)}; }}")
    cons = ",".join(["=f"] * count + [str(i) for i in range(count)] + ["r"] * 4 + ["l", "r"])
    ret = ir.LiteralStructType([L.F32] * count)
    out = _asm(b, text, cons, [*acc, *a, desc_b, L.i32(1)], ret)
    return [b.extract_value(out, i) for i in range(count)]
