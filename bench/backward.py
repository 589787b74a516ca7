"""plait's derived backward kernels vs torch eager, torch.compile and Triton (one run).

    python bench/backward.py [--out FILE] [--variants]

GB/s counts what the gradient must move: LayerNorm/RMSNorm read x, dy, w and
write dx, dw (db); SwiGLU reads g, u, dy and writes dg, du. Peers are timed on
their backward alone (autograd.grad of a retained graph); plait as CUDA-graph
replays of plait.run of the derived gradient algorithm.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import triton_peers_bwd as tb  # noqa: E402
from report import peer_table, publish  # noqa: E402
from timing import both, copy_bandwidth, graph_ms, median_ms  # noqa: E402

import plait  # noqa: E402
from plait.autodiff import forward_with_saved, grad, vjp  # noqa: E402
from plait.schedule import Schedule  # noqa: E402


def ln(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def swi(g, u):
    return F.silu(g) * u


def autograd_peer(fn, inputs, dy):
    leaves = [t.detach().requires_grad_() for t in inputs]
    y = fn(*leaves)
    return lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def cases():
    from layernorm import layernorm
    from rmsnorm import rmsnorm
    from swiglu import swiglu
    bf = torch.bfloat16
    M, N = 16384, 8192
    x = torch.randn(M, N, device="cuda", dtype=bf)
    w = torch.randn(N, device="cuda", dtype=bf)
    b = torch.randn(N, device="cuda", dtype=bf)
    dy = torch.randn(M, N, device="cuda", dtype=bf)
    g = torch.randn(8192, 8192, device="cuda", dtype=bf)
    u = torch.randn(8192, 8192, device="cuda", dtype=bf)
    dg = torch.randn(8192, 8192, device="cuda", dtype=bf)
    mn = M * N * 2
    yield ("layernorm bwd 16384x8192", grad(layernorm), (x, w, b), dict(dout=dy), ln,
           (x, w, b), dy, 3 * mn + 3 * N * 2, lambda: tb.layernorm_bwd(x, w, dy), ("dx", "dw", "db"))
    yield ("rmsnorm bwd 16384x8192", grad(rmsnorm), (x, w), dict(dout=dy), rms,
           (x, w), dy, 3 * mn + 2 * N * 2, lambda: tb.rmsnorm_bwd(x, w, dy), ("dx", "dw"))
    # The same gradients with the forward's row statistics saved: the schedule decision
    # `save: [mu, rstd]`; the row sums left are one round. The derived backward reads them
    # in the forward's dtype (bf16 here; torch keeps fp32).
    for algo, label, saved, ins, fn, outs, extra, peer in (
            (layernorm, "layernorm", ("mu", "rstd"), (x, w, b), ln, ("dx", "dw", "db"), 3,
             tb.layernorm_bwd),
            (rmsnorm, "rmsnorm", ("rstd",), (x, w), rms, ("dx", "dw"), 2, tb.rmsnorm_bwd)):
        stats = plait.run(forward_with_saved(algo, saved), *ins)
        kw = dict(dout=dy, **{k: stats[k] for k in saved})
        yield (f"{label} bwd 16384x8192, saved {'/'.join(saved)}", vjp(algo, save=saved), ins,
               kw, fn, ins, dy, 3 * mn + extra * N * 2 + len(saved) * M * 2,
               lambda peer=peer: peer(x, w, dy), outs)
    yield ("swiglu bwd 8192x8192", grad(swiglu), (g, u), dict(dout=dg), swi,
           (g, u), dg, 5 * g.numel() * 2, lambda: tb.swiglu_bwd(g, u, dg), ("dg", "du"))


def variants(name):
    if name.startswith("swiglu"):
        yield from elementwise_variants(name)
        return
    for rows, threads, occ, pf, into in (("wave", 256, None, 2, "shared"),
                                         ("wave", 256, None, 3, "shared"),
                                         ("wave", 256, None, 1, "shared"),
                                         (128, 256, None, 2, "shared"),
                                         ("wave", 512, None, 2, "shared"),
                                         ("wave", 256, None, 2, "registers"),
                                         (64, 256, 2, 2, "shared"), (64, 256, 2, 1, "registers")):
        d = {"algorithm": name, "grid": {"M": rows}, "prefetch": pf, "prefetch_into": into,
             "block": {"N": {"threads": threads, "vector": 8}}}
        if occ:
            d["occupancy"] = occ
        yield f"rows={rows} threads={threads} occ={occ} pf={pf} {into}", Schedule.from_dict(d)


def elementwise_variants(name):
    """Columns per block and threads (vectors of 8), with and without cache hints; then
    walked rows: one block per SM (grid M: wave) with rows copied ahead."""
    for tile, threads in ((512, 64), (1024, 128), (2048, 256), (4096, 512), (8192, 512)):
        for hints in (False, True) if tile == 1024 else (False,):
            yield f"tile={tile} threads={threads} hints={hints}", Schedule.from_dict(
                {"algorithm": name, "grid": {"M": 1, "N": tile}, "cache_hints": hints,
                 "block": {"N": {"threads": threads, "vector": 8}}})
    # Walked rows measured 3824-3941 GB/s (H200, 2026-12-02); the best of them stays.
    for rows, threads, pf, into, occ in ((16, 512, 2, "shared", 2),):
        d = {"algorithm": name, "grid": {"M": rows}, "prefetch": pf, "prefetch_into": into,
             "block": {"N": {"threads": threads, "vector": 8}}}
        if occ:
            d["occupancy"] = occ
        yield (f"rows={rows} threads={threads} pf={pf} {into} occ={occ}",
               Schedule.from_dict(d))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--only", help="run the workloads whose name contains this")
    args = ap.parse_args()
    torch.manual_seed(0)
    copy = copy_bandwidth() * 1000
    print(f"device copy {copy:.0f} GB/s")
    rows = []
    for name, bwd, ins, kw, fn, tins, dy, nbytes, triton_fn, outs in cases():
        if args.only and args.only not in name:
            continue
        leaves = [t.detach().double().requires_grad_() for t in tins]
        ref = torch.autograd.grad(fn(*leaves).double(), leaves, dy.double())
        got = plait.run(bwd, *ins, **kw)
        errs = [rel(got[o], r) for o, r in zip(outs, ref)]
        print(f"  {name}: plait max_rel_err " + " ".join(f"{o}={e:.1e}" for o, e in zip(outs, errs)))
        if args.variants:
            for label, sched in variants(bwd.name):
                try:
                    ms = graph_ms(lambda: plait.run(bwd, *ins, schedule=sched, **kw))
                    print(f"    variant {label:22s} {nbytes / ms / 1e6:7.0f} GB/s")
                except Exception as exc:
                    print(f"    variant {label:22s} failed: {str(exc).splitlines()[0][:90]}")
        fig = {}
        fig["plait"] = nbytes / graph_ms(lambda: plait.run(bwd, *ins, **kw)) / 1e6
        fig["torch"] = nbytes / median_ms(autograd_peer(fn, tins, dy)) / 1e6
        fig["torch.compile"] = nbytes / median_ms(autograd_peer(torch.compile(fn), tins, dy)) / 1e6
        fig["triton"] = nbytes / both(triton_fn)[1] / 1e6
        print("  " + name + " " + " ".join(f"{k} {v:.0f}" for k, v in fig.items()))
        rows.append((name, fig, max(errs)))
    table = peer_table([(name, f, f"{err:.1e}") for name, f, err in rows], copy,
                       "plait: CUDA-graph replay medians; peers: autograd.grad medians "
                       "(do_bench)", extra="plait max_rel_err")
    publish(table, args.out)

if __name__ == "__main__":
    main()
