"""`plait.compile`: a program bound once to its arguments' shapes, dtypes and device.

    k = plait.compile(layernorm, like=(x, w, b), eps=1e-6)   # checks, compiles, packs
    y = k(x, w, b)                                           # then: launch, nothing else
    y = k(x2, w, b, eps=1e-5)                                # same shapes, other data/scalar

Building does everything `plait.run` does before launching (bind, describe, trace,
bind sizes, resolve and check the schedule, compile, load the kernels, pack their
parameters, work out the grids, build the launcher). A call then checks each argument
(dtype, shape, device, contiguity) against what the handle was built for, allocates the
outputs, writes the buffer addresses into the packed parameters and launches on the
current stream of the arguments' family. A mismatch is a PlaitError naming the
argument. With torch tensors on a GPU, outputs and temporaries are torch allocations
and nothing synchronizes, so a call can be captured in a CUDA graph and replayed (that
path is runtime/compiled_torch.py).

A handle built for host arrays (numpy, or torch CPU tensors) on the GPU copies them
over and back each call; one built with device='cpu' runs the CPU executor.
"""
from __future__ import annotations

import os
import threading

from plait.dsl.errors import PlaitError
from plait.dsl.reference import bind_sizes

from . import arrays, binding, driver   # driver imports cuda-bindings only when used
from .compiled_torch import TorchPath, torch_raw_stream, torch_signature


def _describe(info: arrays.ArrayInfo) -> str:
    """'bf16 [37, 3001] torch on cuda:1': what a mismatch error shows of an argument."""
    if info.family == "torch" and info.on_device:
        where = str(info.obj.device)
    else:
        where = "the GPU" if info.on_device else "the host"
    return f"{info.dtype} {list(info.shape)} {info.family} on {where}"


def _scalar_defaults(algo) -> dict | None:
    """The scalars a call that gives only the tensors (in order) gets, or None when such a
    call is not possible (a scalar without default, or a scalar between tensors)."""
    names = [p.name for p in algo.params]
    tensors = [p.name for p in algo.tensor_params]
    if names[:len(tensors)] != tensors:
        return None
    out = {}
    for p in algo.params:
        if not p.is_tensor:
            if p.default is None:
                return None
            out[p.name] = binding.scalar_value(p, p.default)
    return out


class Compiled(TorchPath):
    """A callable bound to one algorithm, schedule, shapes, dtypes and device."""

    def __init__(self, algo, tensors: dict, scalars: dict, schedule=None,
                 device: str = "auto", target: str | None = None):
        from . import api
        self.algorithm = algo
        self.scalars = dict(scalars)
        infos = {name: arrays.describe(name, value) for name, value in tensors.items()}
        family, on_device = arrays.common_family(list(infos.values()))
        self.family, self.on_device = family, on_device
        self._all_torch = bool(infos) and all(i.family == "torch" for i in infos.values())
        self.names = list(infos)
        self.graph = algo.graph({name: info.dtype for name, info in infos.items()})
        self.sizes = bind_sizes(self.graph, {name: info.shape for name, info in infos.items()})
        self.device_index = self._device_index(infos)
        self.gpu = api.use_gpu(device, on_device)
        self.target = target or (self._gpu_target() if self.gpu else api.DEFAULT_TARGET)
        self.schedule = api.resolve_schedule(algo, schedule, self.target, self.graph)
        if schedule is None and self.schedule is None and os.environ.get("PLAIT_TUNED"):
            # opt-in: a tuned entry of the database (runtime/tune_recall.py)
            from .tune_recall import tuned_schedule
            self.schedule = tuned_schedule(algo, self.graph, self.sizes, self.target)
        binding.check_graph_dtypes(self.graph, infos)
        binding.check_storage(self.schedule, infos)
        # What the arguments were, kept as text and tuples: the handle holds no array alive.
        self._wanted = {n: (self._meta(i), _describe(i)) for n, i in infos.items()}
        self._built_for = [self._signature_of(info) for info in infos.values()]
        self.outputs = list(self.graph.outputs)
        self._param_names = [p.name for p in algo.params]
        self._tensors_first = self._param_names[:len(self.names)] == self.names
        self.defaults = _scalar_defaults(algo)
        self._lock = threading.Lock()
        self._packed_scalars = self.scalars     # what the kernel parameters hold now
        self._single = self.outputs[0] if self.outputs == ["out"] else None
        self._torch_fast = False
        self.program = None
        self.aligned = all(info.aligned or not info.on_device for info in infos.values())
        # an empty axis: no kernel, the host gives the outputs (lowering/graph/empty_axes.py)
        self._empty = any(extent == 0 for extent in self.sizes.values())
        if self.gpu and not self._empty:
            self._prepare_gpu(api, infos)

    # ------------------------------------------------------------ building

    @staticmethod
    def _device_index(infos) -> int:
        seen = {}
        for name, info in infos.items():
            if info.family == "torch" and info.on_device:
                seen[name] = info.obj.get_device()
        if len(set(seen.values())) > 1:
            listing = ", ".join(f"{n} on cuda:{d}" for n, d in seen.items())
            raise PlaitError(f"all tensors must be on one GPU ({listing})")
        return next(iter(seen.values()), 0)

    def _gpu_target(self) -> str:
        from . import api
        return api.gpu_target(self.device_index)

    def _prepare_gpu(self, api, infos) -> None:
        from . import packing
        self.program = api.get_program(self.graph, self.schedule, self.sizes, self.aligned,
                                       self.target)
        full = self.program.complete_sizes(self.sizes)
        buffers = self.program.buffers
        slots = {b.name: i for i, b in enumerate(buffers)}
        for b in buffers:
            if b.role == "input" and b.name not in infos:
                raise PlaitError(f"the compiled program reads input {b.name!r}, which "
                                 f"{self.graph.name} does not take")
        missing = [n for n in self.outputs if n not in slots or buffers[slots[n]].role == "input"]
        if missing:
            raise PlaitError(f"the compiled program writes no buffer for output(s) {missing}")
        self._input_slots = [slots.get(n) for n in self.names]
        self._reads = [(i, slot) for i, slot in enumerate(self._input_slots) if slot is not None]
        self._allocs = [(i, b.name, b.shape(full), b.dtype, b.zero)
                        for i, b in enumerate(buffers) if b.role != "input"]
        # one address per buffer, which every kernel's parameters point into
        self._pointers = packing.buffer_array(len(buffers))
        dev = self.device_index
        sms = driver.multiprocessors(dev)
        self._packed, self._launches = [], []
        for kernel in self.program.kernels:
            func = driver.get_function(kernel.ptx, kernel.entry, kernel.name, dev)
            driver.set_dynamic_shared(func, kernel.dynamic_shared, kernel.name, dev)
            grid, block = driver.check_launch(
                kernel.blocks(full, sms if kernel.persistent else None), kernel.threads,
                kernel.name, kernel.target)
            packed = packing.PackedArgs(kernel, full, self.scalars, slots, self._pointers)
            self._packed.append(packed)
            self._launches.append((func, grid, block, int(kernel.dynamic_shared),
                                   packed.address, kernel.name))
        self._maps = [p for p in self._packed if p.maps]    # re-encoded when they move
        self._sync_each = bool(os.environ.get("PLAIT_SYNC"))   # debugging: find the fault
        self._run = driver.launcher(dev, self._launches, self._sync_each)
        if self._all_torch and self.on_device:
            import torch
            self._prepare_torch(torch.device("cuda", dev), torch_raw_stream())

    # ------------------------------------------------------------ checking a call

    @staticmethod
    def _meta(info: arrays.ArrayInfo) -> tuple:
        device = info.obj.get_device() if info.family == "torch" else info.on_device
        return (info.family, info.dtype, info.shape, device)

    def _signature_of(self, info: arrays.ArrayInfo) -> tuple:
        if self._all_torch:
            return torch_signature(info.obj)
        return self._meta(info)

    def _check(self, values: list) -> None:
        """One comparison on the hot path; the slow path finds the argument to blame."""
        try:
            if self._all_torch:
                if list(map(torch_signature, values)) == self._built_for:
                    return
            elif [self._meta(arrays.describe(n, v))
                  for n, v in zip(self.names, values)] == self._built_for:
                return
        except (AttributeError, TypeError, PlaitError):
            pass                          # not even an array of this family: say what it is
        if len(values) != len(self.names):
            raise PlaitError(f"{self.graph.name}: this handle takes {len(self.names)} arrays "
                             f"({', '.join(self.names)}), got {len(values)}")
        for name, value in zip(self.names, values):
            info = arrays.describe(name, value)     # refuses non-arrays, strides, dtypes
            meta, text = self._wanted[name]
            if self._meta(info) != meta:
                raise PlaitError(f"{self.graph.name}: argument {name!r} is {_describe(info)}, "
                                 f"but this compiled handle was built for {text}; build "
                                 "another with plait.compile(..., like=...) (plait.run "
                                 "does that for you)")
        raise PlaitError(f"{self.graph.name}: the arguments differ from those the handle was "
                         "built for")

    def bind(self, args: tuple, kwargs: dict) -> tuple[list, dict | None]:
        """(tensors in order, scalars this call gives or None): by position or name, as in
        plait.run; scalars not given keep the values the handle was built with."""
        if not kwargs and len(args) == len(self.names) and self._tensors_first:
            return list(args), None
        if len(args) > len(self._param_names):
            raise PlaitError(f"{self.algorithm.name} takes {len(self._param_names)} "
                             f"arguments but {len(args)} were given")
        bound = dict(zip(self._param_names, args))
        for key, value in kwargs.items():
            if key not in self._param_names:
                raise PlaitError(f"{self.algorithm.name} has no argument {key!r}")
            if key in bound:
                raise PlaitError(f"{self.algorithm.name} got argument {key!r} twice")
            bound[key] = value
        missing = [n for n in self.names if n not in bound]
        if missing:
            raise PlaitError(f"{self.algorithm.name}: missing tensor argument {missing[0]!r}")
        scalars = {}
        for p in self.algorithm.params:
            if not p.is_tensor and p.name in bound:
                scalars[p.name] = binding.scalar_value(p, bound[p.name])
        return [bound[n] for n in self.names], scalars

    # ------------------------------------------------------------ calling

    def __call__(self, *args, **kwargs):
        if kwargs or not self._tensors_first or len(args) != len(self.names):
            values, scalars = self.bind(args, kwargs)
            return self.call(values, scalars)
        return self.call(args)            # the tensors alone, in order: nothing to bind

    def call(self, values, scalars: dict | None = None):
        """Run on tensors given in the order of the algorithm's tensor parameters."""
        if self._torch_fast:              # the hot path: torch tensors on the GPU
            if not self._torch_matches(values):
                self._check(values)       # raises, naming the argument
            return self._launch_torch(values, scalars)
        self._check(values)
        if not self.gpu or self._empty:
            return self._run_cpu(values, scalars)
        with self._lock:
            return self._run_other(values, scalars)

    def _set_scalars(self, scalars) -> None:
        """A call's scalars hold for that call only: the next one without them gets the
        handle's own values back. Parameters are rewritten only when a value changes."""
        if scalars == self._packed_scalars:     # a caller giving the same values each call
            return
        if scalars and scalars.keys() != self.scalars.keys():
            scalars = {**self.scalars, **scalars}
        wanted = scalars or self.scalars
        if wanted == self._packed_scalars:
            return
        for packed in self._packed:
            packed.set_scalars(wanted)
        self._packed_scalars = wanted

    def _launch(self, stream: int) -> None:
        for packed in self._maps:
            packed.refresh_maps()
        self._run(stream)

    def matches(self, values) -> bool:
        """Whether `call(values)` runs this handle as built, where it would not raise:
        the same checks, and the alignment it was compiled for (aligned arrays are not
        for a handle compiled for unaligned ones: plait.run gives them faster kernels)."""
        if self._torch_fast:
            if not self._torch_matches(values):
                return False
            aligned = True
            for t in values:
                if t.data_ptr() & 15:
                    aligned = False
                    break
            return aligned == self.aligned
        try:
            self._check(values)
        except PlaitError:
            return False
        return True

    def try_call(self, values, scalars: dict | None = None):
        """`call`'s result, or None (never an error) where `matches` says no."""
        if not self.matches(values):
            return None
        return self._launch_torch(values, scalars) if self._torch_fast else \
            self.call(values, scalars)

    def _refuse_misaligned(self, name: str, ptr: int) -> None:
        raise PlaitError(f"{self.graph.name}: argument {name!r} is at {ptr:#x}, not 16-byte "
                         "aligned, but this handle was compiled for aligned arrays; pass a "
                         "copy (.clone()) or build a handle for it")

    def _run_other(self, values, scalars):
        """numpy host arrays (copied over and back), plait DeviceArrays, CuPy and other
        __cuda_array_interface__ arrays: the general path, with the same packed launch."""
        infos = [arrays.describe(n, v) for n, v in zip(self.names, values)]
        owned, made = [], {}
        pointers = self._pointers
        like = infos[0] if infos else None
        on_device = like is not None and like.on_device
        family = like.family if on_device else "device"
        stream = like.stream if on_device else 0
        try:
            for slot, info in zip(self._input_slots, infos):
                if slot is None:
                    continue
                if info.on_device:
                    if self.aligned and info.ptr & 15:
                        self._refuse_misaligned(info.name, info.ptr)
                    pointers[slot] = info.ptr
                else:
                    copy = arrays.device_copy(info)
                    owned.append(copy)
                    pointers[slot] = copy.ptr
            for slot, name, shape, dtype, zero in self._allocs:
                obj, ptr = arrays.allocate(family, shape, dtype, zero=zero, like=like,
                                           stream=stream)
                made[name] = obj
                pointers[slot] = ptr
                if isinstance(obj, arrays.DeviceArray):
                    owned.append(obj)
            self._set_scalars(scalars)
            self._launch(stream)
            if on_device:
                out = {n: made[n] for n in self.outputs}
            else:
                driver.synchronize(stream)
                out = {n: arrays.from_numpy(made[n].numpy(), like) for n in self.outputs}
            return binding.package_outputs(self.outputs, out)
        finally:
            from .api import _release
            _release(owned, made, self.graph, stream, on_device)

    def _run_cpu(self, values, scalars):
        from .api import _run_cpu
        infos = {n: arrays.describe(n, v) for n, v in zip(self.names, values)}
        given = {**self.scalars, **(scalars or {})}
        like = next(iter(infos.values()), None)
        out = _run_cpu(self.graph, self.schedule, self.sizes, infos, given, like, self.target)
        return binding.package_outputs(self.outputs, out)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}: {text}" for n, (_, text) in self._wanted.items())
        where = f"cuda:{self.device_index}" if self.gpu else "the CPU executor"
        return f"<plait compiled {self.graph.name} ({shapes}) on {where}, {self.target}>"


def compile(algo, like, schedule=None, device: str = "auto", target: str | None = None,
            **scalars) -> Compiled:
    """A handle for `algo` on arrays shaped like `like` (a tuple in the order of the tensor
    parameters, or a dict by name); `scalars` are baked in and may be overridden per call.
    Same `schedule`, `device` and `target` as plait.run."""
    if isinstance(like, dict):
        tensors_in = dict(like)
    elif isinstance(like, (tuple, list)):
        names = [p.name for p in algo.tensor_params]
        if len(like) != len(names):
            raise PlaitError(f"{algo.name}: like= needs {len(names)} arrays "
                             f"({', '.join(names)}), got {len(like)}")
        tensors_in = dict(zip(names, like))
    else:
        raise PlaitError(f"{algo.name}: like= takes a tuple of arrays (in the order "
                         f"{', '.join(p.name for p in algo.tensor_params)}) or a dict")
    tensors, bound = binding.bind_arguments(algo, (), {**tensors_in, **scalars})
    return Compiled(algo, tensors, bound, schedule, device, target)
