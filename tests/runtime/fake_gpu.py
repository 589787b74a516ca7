"""A GPU that is not there: the driver calls a compiled handle makes, faked, so the launch
sequence can be checked on the CPU. A launch is recorded as cuLaunchKernel would see it:
the parameter array is read back from memory, slot by slot, as the kernel's arguments say.
"""
import ctypes
from dataclasses import dataclass, field

import numpy as np

import plait
from plait.dsl.dtypes import DType
from plait.runtime import api, arrays, driver
from rt_handwritten import axpb_program

_CTYPES = {DType.FP32: ctypes.c_float, DType.INT32: ctypes.c_int32}


def decode(kernel, params: int) -> list:
    """The values the kernel would receive: each slot of the void* array at `params` points
    at the value (an address, an int32 size, or the scalar in its kernel dtype)."""
    out = []
    for i, arg in enumerate(kernel.args):
        where = ctypes.c_void_p.from_address(params + i * ctypes.sizeof(ctypes.c_void_p)).value
        if arg.kind == "buffer":
            out.append(ctypes.c_void_p.from_address(where).value or 0)
        elif arg.kind == "size":
            out.append(ctypes.c_int32.from_address(where).value)
        elif arg.kind == "scalar":
            out.append(_CTYPES[arg.dtype].from_address(where).value)
        else:
            out.append(bytes((ctypes.c_ubyte * 128).from_address(where)))
    return out


@dataclass
class FakeGpu:
    program: object = None
    launches: list = field(default_factory=list)      # (kernel name, grid, block, values)
    allocated: list = field(default_factory=list)
    compiles: list = field(default_factory=list)
    streams: list = field(default_factory=list)       # the stream of each launch


def install(monkeypatch, program_of=axpb_program) -> FakeGpu:
    gpu = FakeGpu()

    class FakeDev:
        def __init__(self, shape, dtype, zero=False):
            self.shape, self.dtype, self.zero = tuple(shape), dtype, zero
            self.ptr = 4096 * (len(gpu.allocated) + 1)
            self.freed = False
            gpu.allocated.append(self)

        def numpy(self):
            return np.full(self.shape, 7.0, self.dtype.numpy)

        def free(self):
            self.freed = True

    def get_program(graph, schedule, sizes, aligned, target):
        gpu.compiles.append((dict(sizes), aligned, target))
        gpu.program = program_of(target)
        return gpu.program

    def launcher(device, launches, sync=False):
        launches = list(launches)       # as built: a later call launches what was prepared

        def run(stream):
            for func, grid, block, shared, params, name in launches:
                k = next(k for k in gpu.program.kernels if k.name == name)
                assert k.entry == func
                gpu.launches.append((name, grid, block, decode(k, params)))
                gpu.streams.append(stream)
        return run

    monkeypatch.setattr(driver, "gpu_available", lambda: True)
    monkeypatch.setattr(driver, "require_gpu", lambda: None)
    monkeypatch.setattr(api, "gpu_target", lambda device=0: "sm_90a")
    monkeypatch.setattr(api, "get_program", get_program)
    monkeypatch.setattr(arrays, "device_copy", lambda info: FakeDev(info.shape, info.dtype))
    monkeypatch.setattr(arrays, "allocate", lambda fam, shape, dtype, zero=False, like=None,
                        stream=0: (lambda d: (d, d.ptr))(FakeDev(shape, dtype, zero)))
    monkeypatch.setattr(arrays, "DeviceArray", FakeDev)
    monkeypatch.setattr(driver, "get_function", lambda ptx, entry, name, device=0: entry)
    monkeypatch.setattr(driver, "multiprocessors", lambda device=0: 132)
    monkeypatch.setattr(driver, "set_dynamic_shared", lambda *a, **k: None)
    monkeypatch.setattr(driver, "launcher", launcher)
    monkeypatch.setattr(driver, "launch", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError("the per-call packing path (driver.launch) was used")))
    monkeypatch.setattr(driver, "synchronize", lambda stream=None: None)
    gpu.FakeDev = FakeDev
    return gpu


TORCH_STREAM = 0x5717          # what the fake torch says its current stream is


def torch_handle(algo, like, **scalars):
    """A handle on the torch hot path (Compiled._launch_torch) without a GPU: built for CPU
    tensors under the fake GPU, then given torch's tables with CPU allocations."""
    import torch
    k = plait.compile(algo, like=like, device="gpu", **scalars)
    k._prepare_torch(torch.device("cpu"), lambda index: TORCH_STREAM)
    return k
