"""Streamed kernels on mma.sync (every target from sm_80): stream/emitter.py's loop with
the products of stream/mma.py.

Tiles are stored row after row, each 16-byte chunk's place in its 128-byte line XORed
with row % 8 (as in gemm.sm80), which ldmatrix reads without bank conflicts. The
residents' A fragments are read into registers once, after the prologue's copies, where
they take at most 32 registers (else again each step).
"""
from __future__ import annotations

from ..artifact import CompiledKernel
from ..nvptx.swizzle import swizzled
from .emitter import StreamEmitter, compiled, stream_ptx
from .mma import fragments, scores, tile_offsets, weighted
from .plan import StreamKernel

__all__ = ["emit_stream_llvm_ir", "stream_kernel", "stream_ptx"]


class Sm80Emitter(StreamEmitter):
    def place(self, row, chunk, n_rows: int, padded: int):
        return swizzled(self.b, row, chunk, padded * 2)

    def prepare_products(self) -> None:
        sk = self.sk
        self.resident_frags = {t.name: fragments(self, t) for t in sk.residents} \
            if sk.residents_in_registers else {}
        self.tile_offsets = {(t.name, trans): tile_offsets(self, t, trans)
                             for t in sk.streamed for trans in (False, True)}

    def scores(self, a, c) -> dict:
        return scores(self, a, c)

    def weighted(self, p: dict, acc: dict, t) -> dict:
        return weighted(self, p, acc, t)


def emit_stream_llvm_ir(sk: StreamKernel, entry: str) -> str:
    return str(Sm80Emitter(sk, entry).module)


def stream_kernel(sk: StreamKernel, entry: str) -> CompiledKernel:
    return compiled(sk, entry, emit_stream_llvm_ir(sk, entry))
