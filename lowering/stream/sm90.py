"""Streamed kernels on wgmma (sm_90a): stream/emitter.py's loop with the products of
stream/wgmma.py, for the plans that `plan.wgmma_refusal` takes.

Each warpgroup (4 warps) takes 64 of the block's rows. Tiles are stored as wgmma's
swizzled panels (stream/wgmma.py); what the threads' cp.async copies wrote is made
visible to the tensor cores' reads (the async proxy) by a proxy fence before the
barrier that publishes it. A warpgroup issues its products together, so a step's
arithmetic takes one branch per block (whole tile or masked), not one per warp.
"""
from __future__ import annotations

from ..artifact import CompiledKernel
from ..nvptx import ops as L
from ..nvptx import ptx_async as A
from .emitter import StreamEmitter, compiled, stream_ptx
from .plan import StreamKernel
from .wgmma import GROUP, paneled, scores, weighted

__all__ = ["emit_stream_llvm_ir", "stream_kernel", "stream_ptx"]


class Sm90Emitter(StreamEmitter):
    SMEM_ALIGN = GROUP
    WARP_BRANCHES = False

    def place(self, row, chunk, n_rows: int, padded: int):
        return paneled(self.b, row, chunk, n_rows)

    def landed(self) -> None:
        A.fence_async_shared(self.b)

    def prepare_products(self) -> None:
        self.group_row = self.b.mul(self.b.lshr(self.warp, L.i32(2)), L.i32(64))

    def scores(self, a, c) -> dict:
        return scores(self, a, c)

    def weighted(self, p: dict, acc: dict, t) -> dict:
        return weighted(self, p, acc, t)


def emit_stream_llvm_ir(sk: StreamKernel, entry: str) -> str:
    return str(Sm90Emitter(sk, entry).module)


def stream_kernel(sk: StreamKernel, entry: str) -> CompiledKernel:
    return compiled(sk, entry, emit_stream_llvm_ir(sk, entry))
