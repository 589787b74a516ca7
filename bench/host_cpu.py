"""The host's Python per call, without a GPU: a plait.compile handle, plait.torch_op and a
torch.compile region, with libcuda replaced by a C stand-in whose two calls do nothing.

    python bench/host_cpu.py [--calls 20000]

The driver's ctypes path runs as on a GPU (real foreign calls into the stand-in, built
here with the C compiler `cc`); the handle is built for CPU tensors and then given the
hot path's tables with CPU allocations (what tests/runtime/fake_gpu.torch_handle does),
so torch.empty here is a CPU allocation (its own row says what it costs). Best of 9
repeats, in microseconds: a figure for Python and torch's host side, never the GPU's.
"""
import argparse
import collections
import ctypes
import os
import subprocess
import tempfile
import timeit

import torch
import torch.nn.functional as F

import plait
from plait.dsl import Tensor, algorithm
from plait.runtime import api, driver, fast_launch

STUB = r"""
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                   void **extra) { return 0; }
int cuCtxGetCurrent(void **ctx) { *ctx = (void *)0x1000; return 0; }
"""


@algorithm
def axpb(x: Tensor["M", "N"], b: Tensor["N"], a: float = 2.0):
    return x * a + b


def stub_driver(folder: str) -> None:
    """driver's state as _init leaves it on a GPU, over the C stand-in for libcuda."""
    src, lib = os.path.join(folder, "stub.c"), os.path.join(folder, "libstubcuda.so")
    with open(src, "w") as f:
        f.write(STUB)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, src], check=True)

    class Drv:                           # what the hot path reads of cuda-bindings
        class CUresult(int):
            CUDA_SUCCESS = 0
    driver._state.update(drv=Drv, device=0, context=0x1000, count=1, success=0,
                         fast=fast_launch.FastDriver(ctypes.CDLL(lib)))
    driver._devices[0] = (0, 0x1000, 0x1000)
    api.gpu_target = lambda device=0: "sm_90a"
    driver.get_function = lambda ptx, entry, name, device=0: 0x5000
    driver.multiprocessors = lambda device=0: 132
    driver.set_dynamic_shared = lambda *a, **k: None


def hot(algo, like):
    """A handle on the torch hot path for CPU tensors `like`."""
    k = plait.compile(algo, like=like, device="gpu")
    k._prepare_torch(torch.device("cpu"), lambda index: 0)
    return k


def region():
    """The plait region of silu(x @ w.t()) * 2 (an input with a size-1 dim, a transposed
    weight), with a hot-path handle, and the arguments its graph hands it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from plait.runtime.fx_partition import plait_regions
    from plait.runtime.fx_runner import PlaitRegion
    x, w = torch.randn(1, 64, 128), torch.randn(256, 128)
    gm = plait_regions(make_fx(lambda x, w: F.silu(x @ w.t()) * 2.0, tracing_mode="fake")(x, w),
                       collections.Counter(), "bench")
    (r,) = [m for m in gm.modules() if isinstance(m, PlaitRegion)]
    seen = []
    r.forward = lambda *a: seen.append(a)    # what the graph passes the region
    gm(x, w)
    del r.forward
    r.handle = hot(r.algorithm, tuple(r._inputs(seen[0])))
    return r, seen[0]


def best_us(fn, calls: int) -> float:
    return min(timeit.repeat(fn, number=calls, repeat=9)) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    calls = ap.parse_args().calls
    with tempfile.TemporaryDirectory() as folder:
        stub_driver(folder)
        x, b = torch.randn(256, 256), torch.randn(256)
        k = hot(axpb, (x, b))
        op = plait.torch_op(axpb, name="plait::host_cpu_axpb")
        op.plain.device_flag = "is_cpu"      # CPU tensors stand in for CUDA ones
        op.handles.handles = [k]
        xg = x.clone().requires_grad_()
        r, args = region()
        inputs = r._inputs(args)
        rows = [
            ("torch.empty(256, 256) on CPU", lambda: torch.empty(256, 256)),
            ("handle k(x, b)", lambda: k(x, b)),
            ("torch_op(x, b)", lambda: op(x, b)),
            ("torch_op.op(x, b, 2.0) (dispatcher)", lambda: op.op(x, b, 2.0)),
            ("torch_op(x, b), x needs grad", lambda: op(xg, b)),
            ("region's handle alone", lambda: r.handle(*inputs)),
            ("region call", lambda: r(*args)),
        ]
        print(f"torch {torch.__version__}; libcuda stubbed; best of 9 x {calls} calls")
        for label, fn in rows:
            n = calls // 4 if "grad" in label else calls
            print(f"{label:<38} {best_us(fn, n):7.2f} us")


if __name__ == "__main__":
    main()
