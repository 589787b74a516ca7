"""A region of an FX graph that runs through plait, or through torch when plait refuses.

`PlaitRegion(algo, spec, fallback)` replaces a fused submodule. Its first call builds the
compiled handle (`plait.compile`, the CPU executor for CPU tensors); each call squeezes
the inputs' size-1 dims, makes them contiguous, runs the handle and gives each output
torch's shape and strides. Any refusal (the handle cannot be built, a call's arguments
do not match it, an output differs from what torch's graph says) runs `fallback`, the
region's original torch submodule, and says why on the logger.

What a call does to each tensor is worked out once from the spec (`_in_plan`,
`_out_plan`), so a call makes only the torch calls its ports need: none of permute,
reshape or a restriding copy where torch's layout already is plait's.
"""
from __future__ import annotations

import logging
import math

import torch

from plait.dsl.errors import PlaitError

from . import arrays
from .fx_region import RegionSpec

log = logging.getLogger("plait.torch_backend")


class PlaitRegion(torch.nn.Module):
    def __init__(self, algo, spec: RegionSpec, fallback: torch.nn.Module, stats):
        super().__init__()
        self.algorithm, self.spec, self.fallback, self.stats = algo, spec, fallback, stats
        self.handle = None
        self.refused: str | None = None
        self._ins = [_in_plan(p) for p in spec.inputs]
        self._outs = [_out_plan(p) for p in spec.outputs]
        self._finish = None       # each output's reshape and copy, once the first call checked

    def _inputs(self, args) -> list:
        out = []
        for a, (perm, shape) in zip(args, self._ins):
            if perm is not None:
                a = a.permute(perm)
            a = a.contiguous()
            out.append(a if shape is None else a.view(shape))
        return out

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
        if self._finish is None:        # the first call: check, and plan what every call does
            self._finish = self._plan_finish(result)
        return [self._finished(r, shape, copy, p)         # keep their dtype, shape, strides
                for r, p, (shape, copy) in zip(result, self.spec.outputs, self._finish)]

    def _plan_finish(self, result) -> tuple:
        """Per output, the reshape and whether a copy into torch's strides is needed, after
        checking that the handle's outputs are what torch's graph says."""
        if len(result) != len(self.spec.outputs):
            raise PlaitError(f"plait returned {len(result)} outputs, the region has "
                             f"{len(self.spec.outputs)}")
        finish = []
        for i, (r, p, (shape, copy)) in enumerate(zip(result, self.spec.outputs, self._outs)):
            if not isinstance(r, torch.Tensor):
                r = torch.as_tensor(r)
            if r.dtype != p.dtype or r.shape != p.plait_shape:
                raise PlaitError(f"output {i} is {r.dtype} {list(r.shape)}, torch's "
                                 f"graph says {p.dtype} {list(p.plait_shape)}")
            if shape is not None:
                r = r.reshape(shape)
            if not r.is_contiguous():     # not what the plan assumed: compare the strides
                copy = r.numel() > 1 and _significant(r.stride(), p.shape) != \
                    _significant(p.stride, p.shape)
            finish.append((shape, copy))
        return tuple(finish)

    @staticmethod
    def _finished(r, shape, copy: bool, p):
        if not isinstance(r, torch.Tensor):
            r = torch.as_tensor(r)
        if shape is not None:
            r = r.reshape(shape)
        if copy:
            r = torch.empty_strided(p.shape, p.stride, dtype=r.dtype, device=r.device).copy_(r)
        return r

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

    def __call__(self, *args):
        """Straight to forward, past nn.Module's hook dispatch (a region has no hooks;
        about 1 us of a region call's 13 on bench/host_cpu.py)."""
        return self.forward(*args)

    def _refuse(self, e: Exception) -> None:
        self.refused = f"{type(e).__name__}: {e}"
        self.stats["regions_refused"] += 1
        level = logging.INFO if isinstance(e, PlaitError) else logging.WARNING
        log.log(level, "plait region %s falls back to torch: %s\n%s", self.algorithm.name,
                self.refused, self.spec.source)


def _in_plan(p) -> tuple:
    """(permutation or None, plait's shape or None) for an input port: permute only where
    the dims larger than 1 change order (moving size-1 dims changes no layout), view as
    plait's shape only where it drops size-1 dims. After permute, `contiguous()` makes
    the layout the one the view needs."""
    big = [d for d in p.perm if p.shape[d] != 1]
    perm = None if big == sorted(big) else p.perm
    now = p.shape if perm is None else tuple(p.shape[d] for d in perm)
    return perm, None if now == p.plait_shape else p.plait_shape


def _out_plan(p) -> tuple:
    """(torch's shape or None, whether a contiguous result must be copied to torch's
    strides) for an output port."""
    shape = None if p.shape == p.plait_shape else p.shape
    copy = math.prod(p.shape) > 1 and _significant(arrays.c_strides(p.shape), p.shape) != \
        _significant(p.stride, p.shape)
    return shape, copy


def _significant(stride, shape) -> tuple:
    """Strides of the dims that have more than one element (the others' never matter)."""
    return tuple(s for s, n in zip(stride, shape) if n != 1)
