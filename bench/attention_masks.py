"""plait's masked and soft-capped attention vs FlexAttention, forward and backward, bf16.

    python bench/attention_masks.py [--quick] [--long] [--kinds K,...] [--repeat N] [--out F]

Workloads (B4 H16 S = T 4096, with --long also B1 H16 16384; D 64 and 128, scale 1/sqrt(D)), each an
algorithm of examples/attention.py written as math:
- window: `sliding_window_attention`, causal with a window of 1024 keys;
- documents: `document_attention`, causal within documents packed along S (8 documents
  per sequence, random lengths, sorted int32 ids per token);
- softcap: `softcap_attention`, cap 30 on the scaled scores, no mask;
- blocks: `block_sparse_attention`, a random int32 block mask of 128 x 128 blocks keeping
  3 of every 32 key blocks per query block (the diagonal one and two others: 90.6%
  sparse); the row also gives plait's time against its own dense forward (`attention`).
The peer is torch's FlexAttention (`flex_attention` under torch.compile), given the same
mask as a mask_mod with its BlockMask (so it skips the blocks the mask empties) or the
cap as a score_mod. plait skips the key tiles its mask empties by interval arithmetic
over each tile (positions, the document ids' least and greatest, the block mask), and
visits only the tiles from a block's first non-empty one to its last.

TFLOP/s counts unmasked work only: 4·H·D per kept (query, key) pair forward, 2.5 times
that backward (DESIGN.md). The forward is timed as CUDA-graph replays, plait through one
plait.compile handle; the backward as called (do_bench medians), plait's the derived
`grad(..., save=("out", "lse"))` over what plait's forward saved, FlexAttention's
`torch.autograd.grad` of a retained graph. Before timing, both contenders' outputs (and
gradients) are checked against a float32 dense reference (the scores in memory) with
bf16 tolerances relative to each tensor's scale. A contender that fails gets '-' and a
numbered note, and the run goes on.

Workloads and pair counts are plain data: tests/bench checks them without CUDA.
"""

import argparse
import datetime
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import attention as forward_bench  # noqa: E402  (bench/attention.py: loading, checks)

KINDS = ("window", "documents", "softcap", "blocks")
EXAMPLES = {"window": "sliding_window_attention", "documents": "document_attention",
            "softcap": "softcap_attention", "blocks": "block_sparse_attention"}
BLOCK = 128                     # the block mask's block, as examples/attention.py reads it
PEERS = ("flex",)
CONTENDERS = ("plait",) + PEERS


@dataclass(frozen=True)
class MaskWorkload:
    kind: str
    B: int
    H: int
    S: int
    D: int
    backward: bool = False
    window: int = 1024          # keys a query sees, its own included (window)
    documents: int = 8          # documents per sequence (documents)
    cap: float = 30.0           # softcap
    kept_blocks: int = 3        # key blocks per query block of 32 (blocks)

    @property
    def name(self) -> str:
        what = {"window": f"window {self.window}", "documents": f"{self.documents} documents",
                "softcap": f"softcap {self.cap:g}",
                "blocks": f"blocks {100 * (1 - self.kept_blocks / 32):.1f}% sparse"}[self.kind]
        return f"bf16 B{self.B} H{self.H} S{self.S} D{self.D} {what}" + \
            (" bwd" if self.backward else "")

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.D)


def workloads(quick: bool = False, long: bool = False, kinds=KINDS) -> list[MaskWorkload]:
    sizes = ((4, 16, 4096),) + (((1, 16, 16384),) if long else ())
    dims = (128,) if quick else (64, 128)
    return [MaskWorkload(kind, B, H, S, D, backward) for backward in (False, True)
            for D in dims for B, H, S in sizes for kind in KINDS if kind in kinds]


def document_ids(w: MaskWorkload, device="cuda", seed=0) -> torch.Tensor:
    """[B, S] int32: w.documents documents per row, cut at distinct random positions."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(w.B):
        cuts = torch.randperm(w.S - 1, generator=gen)[:w.documents - 1].sort().values + 1
        lengths = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([w.S])]))
        rows.append(torch.repeat_interleave(torch.arange(w.documents), lengths))
    return torch.stack(rows).to(device=device, dtype=torch.int32)


def block_mask(w: MaskWorkload, device="cuda", seed=0) -> torch.Tensor:
    """[B, H, S/128, S/128] int32: per query block its diagonal key block and w.kept_blocks
    - 1 others, drawn at random (no row is fully masked: the dense reference stays
    finite)."""
    gen = torch.Generator().manual_seed(seed)
    n = -(-w.S // BLOCK)
    scores = torch.rand(w.B, w.H, n, n, generator=gen)
    scores += 2 * torch.eye(n)              # the diagonal first
    kept = scores.topk(min(w.kept_blocks, n), dim=-1).indices
    return torch.zeros(w.B, w.H, n, n, dtype=torch.int32).scatter_(-1, kept, 1).to(device)


def mask_input(w: MaskWorkload, device="cuda"):
    """What the mask reads besides positions: document ids, the block mask, or None."""
    if w.kind == "documents":
        return document_ids(w, device)
    return block_mask(w, device) if w.kind == "blocks" else None


def kept_pairs(w: MaskWorkload, ids: torch.Tensor | None = None) -> int:
    """(query, key) pairs the mask keeps, over the whole batch (and heads, for blocks:
    summed over them and divided by H, as flops() multiplies by H)."""
    if w.kind == "softcap":
        return w.B * w.S * w.S
    if w.kind == "blocks":
        sizes = torch.full((-(-w.S // BLOCK),), BLOCK)
        sizes[-1] = w.S - BLOCK * (len(sizes) - 1)
        per_block = sizes[:, None] * sizes[None, :]
        return int((ids.cpu().long() * per_block).sum()) // w.H
    if w.kind == "window":     # query s keeps keys s-window+1 .. s
        full = max(w.S - w.window, 0)
        ramp = min(w.S, w.window)
        return w.B * (ramp * (ramp + 1) // 2 + full * w.window)
    lengths = torch.stack([torch.bincount(row.long().cpu(), minlength=w.documents)
                           for row in ids])
    return int((lengths * (lengths + 1) // 2).sum())


def flops(w: MaskWorkload, ids=None) -> float:
    forward = 4 * w.H * w.D * kept_pairs(w, ids)
    return 2.5 * forward if w.backward else forward


def keep_mask(w: MaskWorkload, ids, device) -> torch.Tensor | None:
    """[B, 1, S, S] bool of the kept pairs (None: every pair), for the dense reference."""
    if w.kind == "softcap":
        return None
    if w.kind == "blocks":       # ids: the block mask (of the heads the caller holds)
        expanded = ids.repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)
        return expanded[..., :w.S, :w.S] != 0
    s = torch.arange(w.S, device=device)
    keep = s[None, :] <= s[:, None]
    if w.kind == "window":
        keep = keep & (s[:, None] - s[None, :] < w.window)
        return keep[None, None]
    return keep[None, None] & (ids[:, None, :, None] == ids[:, None, None, :])


def dense_reference(w: MaskWorkload, q, k, v, ids):
    """float32 attention with the scores in memory: what both contenders must give."""
    q, k, v = (t.float() for t in (q, k, v))
    s = torch.matmul(q, k.transpose(-1, -2)) * w.scale
    if w.kind == "softcap":
        s = w.cap * torch.tanh(s / w.cap)
    keep = keep_mask(w, ids, q.device)
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def _head_chunks(w: MaskWorkload):
    """Slices of the heads whose dense fp32 scores stay near 1 GiB (S16384: one head)."""
    per = max(1, 2**28 // (w.B * w.S * w.S))
    return [slice(h, min(h + per, w.H)) for h in range(0, w.H, per)]


def reference(w: MaskWorkload, q, k, v, ids, dout=None):
    """The dense reference's output, or with dout its (dq, dk, dv), a few heads at a time."""
    parts = []
    for h in _head_chunks(w):
        if dout is None:
            parts.append((dense_reference(w, q[:, h], k[:, h], v[:, h], _heads(w, ids, h)),))
            continue
        qh, kh, vh = (t[:, h].detach().float().requires_grad_() for t in (q, k, v))
        out = dense_reference(w, qh, kh, vh, _heads(w, ids, h))
        parts.append(torch.autograd.grad(out, (qh, kh, vh), dout[:, h].float()))
    got = tuple(torch.cat(ts, dim=1) for ts in zip(*parts))
    return got[0] if dout is None else got


def _heads(w: MaskWorkload, ids, h: slice):
    """The mask input of heads `h` (a block mask has heads; document ids do not)."""
    return ids[:, h] if w.kind == "blocks" else ids


def _scalars(w: MaskWorkload) -> dict:
    extra = {"window": {"window": w.window}, "softcap": {"cap": w.cap}}.get(w.kind, {})
    return {"scale": w.scale, **extra}


def _extra_inputs(w: MaskWorkload, ids) -> tuple:
    if w.kind == "documents":
        return ids, ids
    return (ids,) if w.kind == "blocks" else ()


def plait_forward(w: MaskWorkload, q, k, v, ids):
    import plait
    algo = forward_bench.load_example(EXAMPLES[w.kind])
    args = (q, k, v, *_extra_inputs(w, ids))
    handle = plait.compile(algo, like=args, **_scalars(w))
    return lambda: handle(*args)


def plait_backward(w: MaskWorkload, q, k, v, ids, dout):
    import plait
    from plait.autodiff import forward_with_saved, grad
    save = ("out", "lse")
    algo = forward_bench.load_example(EXAMPLES[w.kind])
    args = (q, k, v, *_extra_inputs(w, ids))
    saved = plait.compile(forward_with_saved(algo, save), like=args, **_scalars(w))(*args)
    bwd = grad(algo, wrt=["q", "k", "v"], save=save)
    handle = plait.compile(bwd, like=(*args, dout, *(saved[n] for n in save)), **_scalars(w))

    def run():
        grads = handle(*args, dout=dout, **{n: saved[n] for n in save})
        return grads["dq"], grads["dk"], grads["dv"]
    return run


def _flex_mods(w: MaskWorkload, ids):
    """(score_mod, mask_mod) for flex_attention."""
    if w.kind == "softcap":
        return (lambda score, b, h, qi, ki: w.cap * torch.tanh(score / w.cap)), None
    if w.kind == "window":
        return None, lambda b, h, qi, ki: (ki <= qi) & (qi - ki < w.window)
    if w.kind == "blocks":
        return None, lambda b, h, qi, ki: ids[b, h, qi // BLOCK, ki // BLOCK] != 0
    return None, lambda b, h, qi, ki: (ki <= qi) & (ids[b, qi] == ids[b, ki])


def flex_call(w: MaskWorkload, ids, device="cuda"):
    """A function of (q, k, v) running the compiled flex_attention with the workload's
    mods (its BlockMask built once, as a training loop would)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    # A fresh compile per workload: past dynamo's recompile limit (8 here) flex_attention
    # silently runs unfused, with the scores in memory (27 GB, 3-21 TFLOP/s, first run).
    torch._dynamo.reset()
    compiled = torch.compile(flex_attention, dynamic=False)
    score_mod, mask_mod = _flex_mods(w, ids)
    block_mask = None if mask_mod is None else create_block_mask(
        mask_mod, w.B if w.kind in ("documents", "blocks") else None,
        w.H if w.kind == "blocks" else None, w.S, w.S, device=device)
    return lambda q, k, v: compiled(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                    scale=w.scale)


def flex_forward(w, q, k, v, ids):
    call = flex_call(w, ids, q.device)
    return lambda: call(q, k, v)


def flex_backward(w, q, k, v, ids, dout):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = flex_call(w, ids, q.device)(q, k, v)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def check(got, want) -> float:
    """Each tensor within bf16 tolerances relative to its scale; the worst relative error."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    worst = 0.0
    for g, r in zip(got, want, strict=True):
        g, r = g.float(), r.float()
        top = r.abs().max().item()
        torch.testing.assert_close(g, r, rtol=2e-2, atol=2e-2 * top)
        worst = max(worst, (g - r).abs().max().item() / top)
    return worst


def measure(w: MaskWorkload, repeat: int) -> forward_bench.Row:
    from timing import both, median_ms
    q, k, v = forward_bench.make_inputs(forward_bench.Workload(w.B, w.H, w.S, w.S, w.D, False))
    ids = mask_input(w)
    dout = torch.randn_like(q)
    fns, notes, mib = {}, [], {}
    for who in CONTENDERS:
        start = time.perf_counter()
        try:
            if w.backward:
                fn = (plait_backward if who == "plait" else flex_backward)(w, q, k, v, ids, dout)
            else:
                fn = (plait_forward if who == "plait" else flex_forward)(w, q, k, v, ids)
            fn()
            torch.cuda.synchronize()
            fns[who] = fn
            print(f"  {w.name:44s} {who:5s} ready in {time.perf_counter() - start:.1f} s",
                  flush=True)
        except Exception as exc:        # noqa: BLE001 - a failing contender is a row note
            print(f"  {w.name:44s} {who:5s} failed: {type(exc).__name__}: {exc}", flush=True)
            notes.append(f"{who}: {forward_bench._failure(exc)}")
            torch.cuda.empty_cache()
    for who, fn in fns.items():
        mib[who] = forward_bench.peak_mib(fn)
    ref = reference(w, q, k, v, ids, dout if w.backward else None)
    for who in list(fns):
        try:
            err = check(fns[who](), ref)
            print(f"  {w.name:44s} {who:5s} matches the dense reference: max rel err "
                  f"{err:.2e}", flush=True)
        except AssertionError as exc:
            notes.append(f"{who}: wrong answer: " + " ".join(str(exc).split())[:300])
            del fns[who]
    del ref
    torch.cuda.empty_cache()
    work = flops(w, ids)
    runs = []
    for _ in range(repeat):
        tf = {}
        for who, fn in fns.items():
            ms = median_ms(fn) if w.backward else both(fn)[1]
            tf[who] = work / ms / 1e9
            print(f"  {w.name:44s} {who:5s} {ms:.4f} ms {tf[who]:.0f} TFLOP/s  "
                  f"peak {mib[who]:.0f} MiB", flush=True)
        runs.append(tf)
    if w.kind == "blocks" and not w.backward and "plait" in fns:
        notes.append(_against_dense(w, q, k, v, fns["plait"]))
    for note in notes:
        print(f"  {w.name:44s} {note}", flush=True)
    tflops = {who: statistics.median(r[who] for r in runs) for who in fns}
    ratios = {"flex": [r["plait"] / r["flex"] for r in runs]} if len(fns) == 2 else {}
    return forward_bench.Row(w, tflops, ratios, mib, notes)


def _against_dense(w: MaskWorkload, q, k, v, sparse) -> str:
    """plait's block-sparse forward time over its dense forward's (examples' `attention`),
    both CUDA-graph replays, interleaved."""
    import plait
    from timing import both
    handle = plait.compile(forward_bench.load_example("attention"), like=(q, k, v),
                           scale=w.scale)
    ratios = [both(sparse)[1] / both(lambda: handle(q, k, v))[1] for _ in range(3)]
    return (f"plait: {statistics.median(ratios):.3f} of its dense forward's time "
            f"({min(ratios):.3f}-{max(ratios):.3f} over 3 pairs)")


def table(rows: list, stamp: str) -> str:
    """bench/attention.py's table with FlexAttention as the one peer."""
    return forward_bench.table(rows, stamp, peers=PEERS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--long", action="store_true", help="S16384 at B1 as well")
    ap.add_argument("--kinds", default=",".join(KINDS), help="a comma list of " + ", ".join(KINDS))
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    if not set(kinds) <= set(KINDS):
        ap.error(f"--kinds: {args.kinds!r}: each one of {', '.join(KINDS)}")
    import triton
    stamp = (f"{datetime.date.today()} · {torch.cuda.get_device_name()} · torch "
             f"{torch.__version__} · triton {triton.__version__} · bf16 · forward: CUDA graph "
             f"replay medians, backward: call medians (do_bench), {args.repeat} repeat(s)")
    rows = []
    for w in workloads(args.quick, args.long, kinds):
        rows.append(measure(w, args.repeat))
        torch.cuda.empty_cache()
        if args.out:                # after each row: a run cut short keeps its table
            with open(args.out, "w") as fh:
                fh.write(table(rows, stamp) + "\n")
    print(table(rows, stamp))
    if args.out:
        from chart import chart_if_possible
        chart_if_possible(args.out)


if __name__ == "__main__":
    main()
