"""Where a plait.compile handle's microseconds go: each step of its hot path timed alone.

    python bench/host_breakdown.py [--calls 20000]

Times, per call: the signature comparison, torch.empty for the output, the current-stream
lookup, driver.enter, writing the packed pointers, the launch itself (cuda-bindings and,
when libcuda opens through ctypes, the ctypes path), and the whole handle call. Tiny
inputs, so every figure is host time. Medians of 5 repeats, in microseconds.

The lone launches reuse the handle's packed parameters, so they need buffer addresses in
them: the handle is called once first (a launch that works), and the buffers the timed
launches write are allocated here and kept alive; their addresses are written into the
packed parameters before each row, since a handle call leaves its own (freed) output's.
"""
import argparse
import ctypes
import statistics
import time

import torch

import plait
from plait.dsl import Tensor, algorithm
from plait.runtime import compiled, driver, fast_launch


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


def kept_pointers(k, values) -> tuple[list[int], list]:
    """Every buffer slot of the handle's program filled: inputs from `values`, outputs and
    temporaries from tensors made here (returned, to be kept alive while launches run)."""
    pointers = [0] * len(k._pointers)
    for i, slot in k._reads:
        pointers[slot] = values[i].data_ptr()
    kept = []
    for slot, _name, shape, dtype, make in k._torch_allocs:
        t = make(shape, dtype=dtype, device=k._torch_device)
        pointers[slot] = t.data_ptr()
        kept.append(t)
    assert all(pointers), "a buffer slot without an address"
    return pointers, kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    calls = ap.parse_args().calls
    x = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, device="cuda")
    k = plait.compile(axpb, like=(x, b))
    torch.testing.assert_close(k(x, b), x * 2.0 + b)    # the first call: one launch that works
    torch.cuda.synchronize()
    pointers, kept = kept_pointers(k, (x, b))
    func, grid, block, shared, packed, name = k._launches[0]
    stream = driver.stream_handle(compiled._torch_stream(0))
    state = driver._state
    saved = state.get("fast")
    try:
        fast = fast_launch.FastDriver(ctypes.CDLL("libcuda.so.1"))
    except OSError:
        fast = None
        print("libcuda does not open through ctypes: no ctypes rows")

    def with_fast(value, fn):
        def run():
            state["fast"] = value
            return fn()
        return run

    def launch():
        driver.launch_prepared(func, grid, block, shared, stream, packed.address, name)

    rows = [
        ("signature of 2 tensors", lambda: list(map(compiled.torch_signature, (x, b)))),
        ("torch.empty 256x256", lambda: torch.empty((256, 256), dtype=torch.float32,
                                                    device="cuda")),
        ("current raw stream", lambda: compiled._torch_stream(0)),
        ("packed.set_pointers", lambda: packed.set_pointers(pointers)),
    ]
    for label, value in (("bindings", None), ("ctypes", fast)):
        if label == "ctypes" and fast is None:
            continue
        rows += [
            (f"driver.enter ({label})", with_fast(value, lambda: driver.enter(0))),
            (f"launch ({label})", with_fast(value, launch)),
            (f"handle call ({label})", with_fast(value, lambda: k(x, b))),
        ]
    rows.append(("torch.add(x, b, alpha=2)", lambda: torch.add(x, b, alpha=2.0)))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {calls} calls x 5")
    try:
        for label, fn in rows:
            packed.set_pointers(pointers)     # a handle call left its own output's address
            med, lo, hi = us(fn, calls)
            print(f"{label:<28} {med:7.2f} us  ({lo:.2f}-{hi:.2f})")
    finally:
        state["fast"] = saved
    torch.cuda.synchronize()
    torch.testing.assert_close(kept[0], x * 2.0 + b)     # the lone launches computed it too
    torch.testing.assert_close(k(x, b), x * 2.0 + b)


if __name__ == "__main__":
    main()
