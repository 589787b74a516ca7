"""Host cost per call of a one-kernel program: plait.run, a plait.compile handle, the
plait.torch_op op, torch eager and a minimal Triton kernel, same process, same run.

    python bench/host_overhead.py [--calls 2000] [--repeats 7] [--profile]

Inputs are tiny, so each call is bound by the host: the figure is the wall time of
`--calls` back-to-back calls (then one synchronize) divided by the calls, repeated
`--repeats` times; the table shows the median and the spread (min-max) per contender.
`--profile` adds cProfile's view of plait.run (where its microseconds go). The
torch_op rows: a plain call (no grad: it launches the op's handle without torch's
dispatcher) and one whose input requires grad (through the op and its autograd).
The floor (issue 13): the handle at <= 10 us per call on an H200.
"""
import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import plait  # noqa: E402
from plait.dsl import Tensor, algorithm  # noqa: E402
from matmul import matmul  # noqa: E402


@algorithm
def axpb(x: Tensor["M", "N"], b: Tensor["N"], a: float = 2.0):
    return x * a + b


def triton_axpb():
    """A minimal Triton kernel for the same elementwise op, or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(x_ptr, b_ptr, out_ptr, n_cols, numel, a, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        x = tl.load(x_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs % n_cols, mask=mask)
        tl.store(out_ptr + offs, x * a + b, mask=mask)

    def run(x, b):
        out = torch.empty_like(x)
        numel = x.numel()
        kernel[(triton.cdiv(numel, 1024),)](x, b, out, x.shape[1], numel, 2.0, BLOCK=1024)
        return out
    return run


def per_call_us(fn, calls: int, repeats: int) -> list[float]:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - start) / calls * 1e6)
    return out


def contenders():
    x = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, device="cuda")
    p = torch.randn(256, 256, device="cuda").bfloat16()
    q = torch.randn(256, 256, device="cuda").bfloat16()
    k_axpb = plait.compile(axpb, like=(x, b))
    k_mm = plait.compile(matmul, like=(p, q))
    op_axpb = plait.torch_op(axpb, name="plait::bench_axpb")
    torch.testing.assert_close(k_axpb(x, b), x * 2.0 + b)
    torch.testing.assert_close(k_mm(p, q).float(), (p @ q).float(), rtol=2e-2, atol=2e-1)
    xg = x.clone().requires_grad_()           # the op's autograd path (no backward run)
    torch.testing.assert_close(op_axpb(x, b), x * 2.0 + b)
    rows = [
        ("x*2+b fp32 256x256", "plait.run", lambda: plait.run(axpb, x, b)),
        ("x*2+b fp32 256x256", "plait.compile handle", lambda: k_axpb(x, b)),
        ("x*2+b fp32 256x256", "plait.torch_op", lambda: op_axpb(x, b)),
        ("x*2+b fp32 256x256", "torch_op, x needs grad", lambda: op_axpb(xg, b)),
        ("x*2+b fp32 256x256", "torch eager", lambda: torch.add(x * 2.0, b)),
        ("x*2+b fp32 256x256", "torch eager (one op)", lambda: torch.add(x, b, alpha=2.0)),
    ]
    tri = triton_axpb()
    if tri is not None:
        torch.testing.assert_close(tri(x, b), x * 2.0 + b)
        rows.append(("x*2+b fp32 256x256", "triton kernel", lambda: tri(x, b)))
    else:
        print("triton is not installed: no Triton row")
    rows += [
        ("matmul bf16 256^3", "plait.run", lambda: plait.run(matmul, p, q)),
        ("matmul bf16 256^3", "plait.compile handle", lambda: k_mm(p, q)),
        ("matmul bf16 256^3", "torch eager a @ b", lambda: p @ q),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile plait.run too")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, python "
          f"{sys.version.split()[0]}; {args.calls} calls x {args.repeats} repeats")
    rows = contenders()
    results = [(w, name, per_call_us(fn, args.calls, args.repeats)) for w, name, fn in rows]
    eager = {}                     # the first torch eager row of each workload is the baseline
    for w, name, t in results:
        if name.startswith("torch eager"):
            eager.setdefault(w, statistics.median(t))
    print(f"{'workload':<22} {'contender':<22} {'median us':>10} {'min-max us':>14} "
          f"{'x eager':>8}")
    for workload, name, times in results:
        med = statistics.median(times)
        print(f"{workload:<22} {name:<22} {med:>10.2f} {min(times):>6.2f}-{max(times):<7.2f} "
              f"{med / eager[workload]:>8.2f}")
    if args.profile:
        x = torch.randn(256, 256, device="cuda")
        b = torch.randn(256, device="cuda")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            plait.run(axpb, x, b)
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
