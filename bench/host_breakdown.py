"""Where a plait.compile handle's microseconds go: each step of its hot path timed alone.

    python bench/host_breakdown.py [--calls 20000]

Times, per call, side by side: the argument check, torch.empty for the output, the
current-stream lookup, the handle's lock, writing the buffer addresses, the launcher
(context check and cuLaunchKernel; through cuda-bindings and, when libcuda opens through
ctypes, through ctypes), driver.enter (what the cuda-bindings launcher does per call),
and the whole handle call both ways. Tiny inputs, so every figure is host time. Medians
of 5 repeats (min-max), in microseconds.

The lone launches reuse a handle's packed parameters, so they need buffer addresses in
them: each handle is called once first (a launch that works), and the buffers the timed
launches write are allocated here and kept alive; their addresses are written into the
handle's buffer array before each row, since a handle call leaves its own (freed)
output's there.
"""
import argparse
import ctypes
import statistics
import time

import torch

import plait
from plait.dsl import Tensor, algorithm
from plait.runtime import arrays, driver, fast_launch


@algorithm
def axpb(x: Tensor["M", "N"], b: Tensor["N"], a: float = 2.0):
    return x * a + b


def us(fn, calls):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(out), min(out), max(out)


def kept_pointers(k, values) -> tuple[list[int], dict]:
    """Every buffer slot of the handle's program filled: inputs from `values`, outputs and
    temporaries from tensors made here (returned by name, to be kept alive while launches
    run)."""
    pointers = [0] * len(k._pointers)
    for i, slot in k._reads:
        pointers[slot] = values[i].data_ptr()
    kept = {}
    for slot, name, shape, dtype, zero in k._allocs:
        t = (torch.zeros if zero else torch.empty)(
            shape, dtype=getattr(torch, arrays._TORCH_BACK[dtype]), device=k._torch_device)
        pointers[slot] = t.data_ptr()
        kept[name] = t
    assert all(pointers), "a buffer slot without an address"
    return pointers, kept


def handle(fast, x, b):
    """A handle built with the ctypes path on (`fast`) or off (None), called once."""
    driver._state["fast"] = fast
    k = plait.compile(axpb, like=(x, b))
    torch.testing.assert_close(k(x, b), x * 2.0 + b)
    torch.cuda.synchronize()
    return k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    calls = ap.parse_args().calls
    x = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, device="cuda")
    driver.require_gpu()
    state = driver._state
    saved = state.get("fast")
    try:
        fast = saved or fast_launch.FastDriver(ctypes.CDLL("libcuda.so.1"))
    except OSError:
        fast = None
        print("libcuda does not open through ctypes: no ctypes rows")
    handles = {"bindings": handle(None, x, b)}
    if fast is not None:
        handles["ctypes"] = handle(fast, x, b)
    state["fast"] = saved
    k = handles["bindings"]
    pointers, kept = kept_pointers(k, (x, b))
    stream = k._raw_stream(0)
    wanted = k._built_for

    def check():          # what Compiled._call_torch reads of each tensor
        for t, (dtype, shape, device, contiguous) in zip((x, b), wanted):
            if not (t.dtype is dtype and t.shape == shape and t.get_device() == device
                    and t.is_contiguous() is contiguous):
                raise AssertionError("the check refused the tensors it was built for")

    def lock():
        with k._lock:
            pass

    def writes():
        buffers = k._pointers
        for i, slot in k._reads:
            buffers[slot] = (x, b)[i].data_ptr()

    def enter(value):
        def run():
            state["fast"] = value
            try:
                if driver.enter(0):
                    driver.leave()
            finally:
                state["fast"] = saved
        return run

    rows = [
        ("check of 2 tensors", check, None),
        ("torch.empty(256, 256)", lambda: torch.empty(256, 256, dtype=torch.float32,
                                                      device=k._torch_device), None),
        ("current raw stream", lambda: k._raw_stream(0), None),
        ("the handle's lock", lock, None),
        ("writing 2 addresses", writes, None),
        ("driver.enter (bindings)", enter(None), None),
    ]
    if fast is not None:
        rows.append(("driver.enter (ctypes)", enter(fast), None))
    for label, h in handles.items():
        rows += [(f"launcher ({label})", lambda h=h: h._run(stream), h),
                 (f"handle call ({label})", lambda h=h: h(x, b), h)]
    rows.append(("torch.add(x, b, alpha=2)", lambda: torch.add(x, b, alpha=2.0), None))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {calls} calls x 5")
    for label, fn, h in rows:
        if h is not None:         # a handle call left its own (freed) output's address
            for slot, ptr in enumerate(pointers):
                h._pointers[slot] = ptr
        med, lo, hi = us(fn, calls)
        print(f"{label:<28} {med:7.2f} us  ({lo:.2f}-{hi:.2f})")
    torch.cuda.synchronize()
    want = x * 2.0 + b
    torch.testing.assert_close(kept["out"], want)        # the lone launches computed it too
    for h in handles.values():
        torch.testing.assert_close(h(x, b), want)


if __name__ == "__main__":
    main()
