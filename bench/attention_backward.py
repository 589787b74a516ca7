"""plait's derived attention backward vs torch SDPA's flash and cuDNN backwards, bf16.

    python bench/attention_backward.py [--quick] [--repeat N] [--out FILE.md]

plait's contender is `grad(attention, wrt=[q, k, v], save=("out", "lse"))` of
examples/attention.py, the backward autodiff derives from the forward's source, run
through one plait.compile handle with what plait's own forward saved for it (as the torch
bridges keep it: the output and the softmax's log-sum-exp, written by the streamed
forward): the row term sum(dout * out), dq streamed over the keys, dk and dv streamed
over the queries in one kernel. `--save out` times the backward that recomputes the
log-sum-exp in a streamed kernel of its own instead. The peers are SDPA's backward for the
same forward, `torch.autograd.grad(out, (q, k, v), dout)` with the graph retained (its
own preprocessing kernels included). Workloads and the unmasked-work count are
bench/attention.py's; TFLOP/s counts the backward as 2.5 forwards (five products of
the forward's size: the flash convention). Every contender is timed as called
(do_bench medians): autograd's backward cannot be captured in a CUDA graph here, and
plait's four launches then carry their host cost (about 10 µs each). Before timing, plait's dq, dk, dv are
checked against the first peer's (bf16 tolerances relative to each gradient's scale).
A contender that fails gets '-' and a numbered note, and the run goes on.
"""

import argparse
import datetime
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import attention as forward_bench  # noqa: E402  (bench/attention.py: workloads, peers)

PEERS = forward_bench.PEERS
CONTENDERS = forward_bench.CONTENDERS


def flops(w) -> float:
    return 2.5 * forward_bench.flops(w)


def peer(backend: str, q, k, v, dout, w):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = forward_bench.sdpa(backend, q, k, v, w)()
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def plait_contender(q, k, v, dout, w, save=("out", "lse")):
    import plait
    from plait.autodiff import forward_with_saved, grad
    algo = forward_bench.load_example(forward_bench.example_for(w))
    bwd = grad(algo, wrt=["q", "k", "v"], save=save)
    qg, dout_g = (forward_bench.grouped_view(t, w) for t in (q, dout))
    forward = plait.compile(forward_with_saved(algo, save), like=(qg, k, v), scale=w.scale)
    saved = forward(qg, k, v)           # out (and lse), as the forward of a training step
    saved = saved if isinstance(saved, dict) else {"out": saved}   # one output: a tensor
    handle = plait.compile(bwd, like=(qg, k, v, dout_g, *(saved[n] for n in save)),
                           scale=w.scale)

    def run():
        grads = handle(qg, k, v, dout=dout_g, **{n: saved[n] for n in save})
        return grads["dq"].view(q.shape), grads["dk"], grads["dv"]
    return run


def check(got, want) -> float:
    worst = 0.0
    for g, r in zip(got, want):
        g, r = g.float(), r.float()
        top = r.abs().max().item()
        torch.testing.assert_close(g, r, rtol=2e-2, atol=2e-2 * top)
        worst = max(worst, (g - r).abs().max().item() / top)
    return worst


def measure(w, repeat: int, save=("out", "lse")) -> forward_bench.Row:
    from timing import median_ms
    q, k, v = forward_bench.make_inputs(w)
    dout = torch.randn_like(q)
    fns, notes, mib = {}, [], {}
    for who in CONTENDERS:
        start = time.perf_counter()
        try:
            fn = plait_contender(q, k, v, dout, w, save) if who == "plait" else \
                peer(who, q, k, v, dout, w)
            fn()
            torch.cuda.synchronize()
            fns[who] = fn
            print(f"  {w.name:36s} {who:6s} ready in {time.perf_counter() - start:.1f} s",
                  flush=True)
        except Exception as exc:        # noqa: BLE001 - a failing contender is a row note
            print(f"  {w.name:36s} {who:6s} failed: {type(exc).__name__}: {exc}", flush=True)
            notes.append(f"{who}: {forward_bench._failure(exc)}")
            torch.cuda.empty_cache()
    for who, fn in fns.items():
        mib[who] = forward_bench.peak_mib(fn)
    if "plait" in fns:
        ref = next((fns[p]() for p in PEERS if p in fns), None)
        if ref is not None:
            try:
                err = check(fns["plait"](), ref)
                print(f"  {w.name:36s} plait matches SDPA: max rel err {err:.2e}", flush=True)
            except AssertionError as exc:
                notes.append("plait: wrong answer against SDPA: " + " ".join(
                    str(exc).split())[:300])
                del fns["plait"]
        else:
            notes.append("plait: unchecked, no SDPA backend ran")
    runs = []
    for _ in range(repeat):
        tf = {}
        for who, fn in fns.items():
            call = median_ms(fn)
            tf[who] = flops(w) / call / 1e9
            print(f"  {w.name:36s} {who:6s} call {call:.4f} ms {tf[who]:.0f} TFLOP/s  "
                  f"peak {mib[who]:.0f} MiB", flush=True)
        runs.append(tf)
    for note in notes:
        print(f"  {w.name:36s} {note}", flush=True)
    tflops = {who: statistics.median(r[who] for r in runs) for who in fns}
    ratios = {p: [r["plait"] / r[p] for r in runs] for p in PEERS
              if p in fns and "plait" in fns}
    return forward_bench.Row(w, tflops, ratios, mib, notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--grouped", action="store_true", help="only the GQA workloads")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--save", default="out,lse",
                    help="what plait's forward saves: out,lse (default) or out")
    args = ap.parse_args()
    save = tuple(args.save.split(","))
    import triton
    rows = []
    for w in forward_bench.workloads(args.quick, args.grouped):
        rows.append(measure(w, args.repeat, save))
        torch.cuda.empty_cache()
    stamp = (f"{datetime.date.today()} · {torch.cuda.get_device_name()} · torch "
             f"{torch.__version__} · cuDNN {torch.backends.cudnn.version()} · triton "
             f"{triton.__version__} · bf16 backward · plait saves {', '.join(save)} · call medians (do_bench), "
             f"{args.repeat} repeat(s)")
    text = forward_bench.table(rows, stamp)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
        from chart import chart_if_possible
        chart_if_possible(args.out)


if __name__ == "__main__":
    main()
