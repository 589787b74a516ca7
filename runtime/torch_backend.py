"""`torch.compile(model, backend="plait")`: the graph's supported parts run as plait kernels.

    import torch
    model = torch.compile(model, backend="plait")   # found through the entry point
    loss = model(x).sum(); loss.backward()          # forward and backward both compiled

Dynamo hands the backend a graph; its scaled_dot_product_attention calls without
dropout are first rewritten as plain attention math (fx_attention), then AOTAutograd
(torch's own, through `torch._dynamo.backends.common.aot_autograd`) splits it into
forward and backward ATen graphs, decomposing composite ops (softmax, LayerNorm,
var_mean, split, GELU's backward, ...) into ones the op table has. Each of the two
graphs goes through fx_partition: maximal regions of supported nodes
become plait algorithms (fx_region) run by PlaitRegion (fx_runner); everything else is
left as the FX nodes torch runs. A region of symbolic sizes (dynamic shapes) is compiled
per concrete size at its first call at it (fx_dynamic). A region plait refuses runs as
torch would, and the logger "plait.torch_backend" says why (PLAIT_TORCH_DEBUG=1 prints
it, each region's DSL source, and a table of the partitioner's choices, on stderr).

CPU tensors are left to torch: plait's CPU executor is the spec the tests check kernels
against, hundreds of times slower than torch's own CPU kernels. A graph with regions on
CPU tensors runs them as torch would and warns once (a PlaitWarning per compiled graph,
forward and backward together), unless the user opts in to the CPU executor:
`torch.compile(model, backend="plait", options={"cpu": True})`, or PLAIT_TORCH_CPU=1 in
the environment (the option wins where both are given).

The name "plait" is registered through the `torch_dynamo_backends` entry point in
pyproject.toml, which torch reads when it looks a backend name up, so `import plait` never
imports torch. `register()` registers it explicitly (an editable install without
metadata). `stats()` counts regions built, compiled, refused and calls either way; tests
read it to know that plait ran.
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import sys
import warnings

import torch

from plait.dsl.errors import PlaitError, PlaitWarning

from . import fx_ops
from .fx_attention import attention_as_math
from .fx_partition import plait_regions

log = logging.getLogger("plait.torch_backend")
_STATS: collections.Counter = collections.Counter()
_GRAPHS = itertools.count()

if os.environ.get("PLAIT_TORCH_DEBUG"):
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("[plait.torch_backend] %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.DEBUG)


def stats() -> dict:
    """regions (written as plait), regions_compiled, regions_refused, region_calls,
    fallback_calls, regions_specialized (a symbolic region written for new sizes),
    cpu_regions_left (on CPU tensors, not opted in): since import or the last
    reset_stats()."""
    return dict(_STATS)


def reset_stats() -> None:
    _STATS.clear()


CPU_ENV = "PLAIT_TORCH_CPU"
_OPTIONS = {"cpu"}


class _CpuPolicy:
    """Whether regions on CPU tensors run through plait, and the one warning of a graph
    (its forward and backward share a policy) when they do not."""

    def __init__(self, options):
        unknown = sorted(set(options or {}) - _OPTIONS)
        if unknown:
            raise PlaitError(f"torch.compile(backend='plait'): unknown option(s) {unknown}; "
                             f"known: {sorted(_OPTIONS)}")
        if options and "cpu" in options:
            self.run = bool(options["cpu"])
        else:
            self.run = os.environ.get(CPU_ENV, "") not in ("", "0")
        self.warned = False

    def left_to_torch(self, label: str, count: int) -> None:
        _STATS["cpu_regions_left"] += count
        if not self.warned:
            self.warned = True
            warnings.warn(PlaitWarning(
                f"torch.compile(backend='plait'), {label}: {count} region(s) on CPU tensors "
                "run as torch runs them, since plait's CPU executor (a spec for tests) is far "
                "slower than torch on the CPU; to run them through plait anyway pass "
                f"options={{'cpu': True}} to torch.compile or set {CPU_ENV}=1"),
                stacklevel=2)


def _compiler(kind: str, cpu: _CpuPolicy):
    from functorch.compile import make_boxed_func

    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        label = f"{kind}{next(_GRAPHS)}"
        gm = plait_regions(gm, _STATS, label, cpu)
        log.debug("%s after partitioning:\n%s", label, gm.code)
        return make_boxed_func(gm.forward)
    compile_graph.__name__ = f"plait_{kind}_compiler"
    return compile_graph


def _aot(cpu: _CpuPolicy):
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=_compiler("fw", cpu), bw_compiler=_compiler("bw", cpu),
                        decompositions=fx_ops.decompositions())


def plait_backend(gm: torch.fx.GraphModule, example_inputs, options=None, mode=None):
    """The torch.compile backend: AOTAutograd with plait compiling both graphs. `options`
    (torch.compile's): {"cpu": True} runs regions on CPU tensors through plait's CPU
    executor. `mode` is accepted and changes nothing here."""
    cpu = _CpuPolicy(options)
    return _aot(cpu)(attention_as_math(gm), example_inputs)


def register() -> None:
    """Register "plait" with torch._dynamo now (a no-op once it is registered)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend
    if "plait" not in _COMPILER_FNS:
        register_backend(name="plait")(plait_backend)


def _entry_point_installed() -> bool:
    from importlib.metadata import entry_points
    return any(ep.name == "plait" and ep.value.startswith(__name__)
               for ep in entry_points(group="torch_dynamo_backends"))


# With the entry point installed, torch registers the name itself when it loads this module
# through it (registering here first would make torch's own registration a duplicate).
if not _entry_point_installed():
    register()
