"""Schedules of plait's streamed attention backward, side by side, and where its time goes.

    python bench/attention_backward_variants.py

For three workloads of bench/attention.py (B4 H16 S1024 D128, B4 H16 S4096 D64 and
D128), each variant (dq added up in the dk/dv kernel or in a loop of its own; rows per
block, keys per step) is compiled,
checked against torch SDPA's flash backward and timed as called (do_bench median); the
default schedule's kernels are then timed one by one with torch.profiler, so the table
says which kernel to work on next.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import attention as forward_bench  # noqa: E402
import attention_backward as backward_bench  # noqa: E402

# name: {kernel suffix: its schedule keys}. By default dq has a loop of its own
# (`reduction` None: the target table's sums_accumulate); `acc` adds it up in the dk/dv
# kernel with fp32 atomics.
ACC = {"reduction": "atomic"}
VARIANTS = {
    "default": {},
    "own_dq128": {"dq": {"grid": {"S": 128}}},
    "own_keys64": {"dq": {"stream": {"T": 64}}, "dk": {"stream": {"S": 64}}},
    "acc": {"dq": ACC},
    "acc_keys16": {"dq": ACC, "dk": {"stream": {"S": 16}}},
    "acc_rows128": {"dq": ACC, "dk": {"grid": {"T": 128}}},
    "acc_rows128_keys16": {"dq": ACC, "dk": {"grid": {"T": 128}, "stream": {"S": 16}}},
}


def schedule_for(name: str, variant: dict):
    if not variant:
        return None
    return {"algorithm": name,
            "kernels": {f"{name}.{kernel}": keys for kernel, keys in variant.items()}}


def main():
    import plait
    from plait.autodiff import grad
    from plait.schedule import Schedule
    from timing import median_ms
    algo = forward_bench.load_example("attention")
    bwd = grad(algo, wrt=["q", "k", "v"], save=("out",))
    for w in (forward_bench.Workload(4, 16, 1024, 1024, 128, False),
              forward_bench.Workload(4, 16, 4096, 4096, 64, False),
              forward_bench.Workload(4, 16, 4096, 4096, 128, False)):
        q, k, v = forward_bench.make_inputs(w)
        dout = torch.randn_like(q)
        with torch.no_grad():
            out = forward_bench.sdpa("flash", q, k, v, w)()
        ref = backward_bench.peer("flash", q, k, v, dout, w)()
        flash = median_ms(backward_bench.peer("flash", q, k, v, dout, w))
        print(f"{w.name}: flash backward {flash:.4f} ms", flush=True)
        cudnn = median_ms(backward_bench.peer("cuDNN", q, k, v, dout, w))
        print(f"{w.name}: cudnn backward {cudnn:.4f} ms", flush=True)
        for name, variant in VARIANTS.items():
            try:
                s = schedule_for(bwd.name, variant)
                handle = plait.compile(bwd, like=(q, k, v, dout, out), scale=w.scale,
                                       schedule=Schedule.from_dict(s) if s else None)
                fn = lambda: handle(q, k, v, dout=dout, out=out)  # noqa: E731
                got = fn()
                err = backward_bench.check((got["dq"], got["dk"], got["dv"]), ref)
                ms = median_ms(fn)
                print(f"  {name:18s} {ms:.4f} ms  {backward_bench.flops(w) / ms / 1e9:.0f} "
                      f"TFLOP/s  plait/flash {flash / ms:.2f}  err {err:.1e}", flush=True)
            except Exception as exc:  # noqa: BLE001 - a failing variant is a line
                print(f"  {name:18s} failed: {type(exc).__name__}: {str(exc)[:200]}")
        handle = plait.compile(bwd, like=(q, k, v, dout, out), scale=w.scale)
        for _ in range(3):
            handle(q, k, v, dout=dout, out=out)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                handle(q, k, v, dout=dout, out=out)
            torch.cuda.synchronize()
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA or "plait" in e.key:
                total = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
                print(f"    kernel {e.key[:40]:40s} {total / 10 / 1000:.4f} ms per call")


if __name__ == "__main__":
    main()
