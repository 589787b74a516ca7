"""A region of an FX graph that runs through plait, or through torch when plait refuses.

`PlaitRegion(algo, spec, fallback)` replaces a fused submodule. Its first call builds the
compiled handle (`plait.compile`, the CPU executor for CPU tensors); each call squeezes
the inputs' size-1 dims, makes them contiguous, runs the handle and gives each output
torch's shape and strides. Any refusal (the handle cannot be built, a call's arguments
do not match it, an output differs from what torch's graph says) runs `fallback`, the
region's original torch submodule, and says why on the logger.
"""
from __future__ import annotations

import logging

import torch

from plait.dsl.errors import PlaitError

from .fx_region import RegionSpec

log = logging.getLogger("plait.torch_backend")


class PlaitRegion(torch.nn.Module):
    def __init__(self, algo, spec: RegionSpec, fallback: torch.nn.Module, stats):
        super().__init__()
        self.algorithm, self.spec, self.fallback, self.stats = algo, spec, fallback, stats
        self.handle = None
        self.refused: str | None = None

    def _inputs(self, args) -> list:
        return [a.permute(p.perm).contiguous().reshape(p.plait_shape)
                for a, p in zip(args, self.spec.inputs)]

    def _build(self, inputs) -> None:
        import plait
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        self.handle = plait.compile(self.algorithm, like=tuple(inputs), device=device)
        self.stats["regions_compiled"] += 1
        log.debug("plait region %s compiled:\n%s", self.algorithm.name, self.spec.source)

    def _outputs(self, result) -> list:
        if isinstance(result, dict):
            result = list(result.values())
        elif not isinstance(result, (tuple, list)):
            result = [result]
        outs = []
        for r, p in zip(result, self.spec.outputs):
            if not isinstance(r, torch.Tensor):
                r = torch.as_tensor(r)
            if r.dtype != p.dtype or tuple(r.shape) != p.plait_shape:
                raise PlaitError(f"output {len(outs)} is {r.dtype} {list(r.shape)}, torch's "
                                 f"graph says {p.dtype} {list(p.plait_shape)}")
            r = r.reshape(p.shape)
            if r.numel() > 1 and _significant(r.stride(), p.shape) != \
                    _significant(p.stride, p.shape):
                r = torch.empty_strided(p.shape, p.stride, dtype=r.dtype,
                                        device=r.device).copy_(r)
            outs.append(r)
        if len(outs) != len(self.spec.outputs):
            raise PlaitError(f"plait returned {len(outs)} outputs, the region has "
                             f"{len(self.spec.outputs)}")
        return outs

    def forward(self, *args):
        if self.refused is None:
            try:
                inputs = self._inputs(args)
                if self.handle is None:
                    self._build(inputs)
                outs = self._outputs(self.handle(*inputs))
                self.stats["region_calls"] += 1
                return outs[0] if self.spec.single else tuple(outs)
            except Exception as e:            # plait refused: torch computes this region
                self._refuse(e)
        self.stats["fallback_calls"] += 1
        return self.fallback(*args)

    def _refuse(self, e: Exception) -> None:
        self.refused = f"{type(e).__name__}: {e}"
        self.stats["regions_refused"] += 1
        level = logging.INFO if isinstance(e, PlaitError) else logging.WARNING
        log.log(level, "plait region %s falls back to torch: %s\n%s", self.algorithm.name,
                self.refused, self.spec.source)


def _significant(stride, shape) -> tuple:
    """Strides of the dims that have more than one element (the others' never matter)."""
    return tuple(s for s, n in zip(stride, shape) if n != 1)
