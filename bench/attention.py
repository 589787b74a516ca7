"""plait's attention forward vs torch SDPA's flash and cuDNN backends, bf16, in one run.

    python bench/attention.py [--quick | --grouped] [--repeat N] [--out FILE.md]

Workloads: D 64 and 128, S = T 1024 and 4096 at B4 H16, 16384 at B1 H16 (16 heads of 128
query tiles fill the 132 SMs 15 times over; at B4 the unfused plait of today would need two
34 GB bf16 score temporaries), each non-causal and causal (examples/attention.py's
`attention` and `causal_attention`; SDPA with is_causal=True, the same top-left mask), with
scale 1/sqrt(D); and grouped-query attention, 32 query heads sharing 8 k, v heads at B2
S4096 (`grouped_query_attention`, `causal_grouped_query_attention`; SDPA with
enable_gqa=True). TFLOP/s counts 4·B·H·D per unmasked (query, key) pair: 4·B·H·S·T·D
without a mask, S(S+1)/2 pairs instead of S·T under the causal mask (DESIGN.md's protocol,
unmasked work only). Each contender is timed as a CUDA-graph replay (bench/timing.py's
`both`; the call time is printed, the replay is tabled), plait through one plait.compile
handle per workload. Before timing, plait's output is checked against SDPA's
(torch.testing.assert_close, bf16 tolerances relative to the output's scale). A contender
that fails (a compile error, out of memory, a wrong answer) gets '-' and a numbered note
under the table, and the run goes on. Peak memory is torch.cuda.max_memory_allocated over
one call less what was allocated before it (the output included), in MiB.

Workloads are plain data (`workloads`, `flops`): tests/bench builds them without CUDA.
"""

import argparse
import datetime
import importlib.util
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "attention.py")
PEERS = ("flash", "cuDNN")
CONTENDERS = ("plait",) + PEERS


@dataclass(frozen=True)
class Workload:
    B: int
    H: int
    S: int
    T: int
    D: int
    causal: bool
    R: int = 1              # query heads per k, v head (grouped-query attention when > 1)

    @property
    def kv_heads(self) -> int:
        return self.H // self.R

    @property
    def name(self) -> str:
        shape = f"B{self.B} H{self.H}" + (f" KV{self.kv_heads}" if self.R > 1 else "") + \
            f" S{self.S}" + (f" T{self.T}" if self.T != self.S else "")
        return f"bf16 {shape} D{self.D}" + (" causal" if self.causal else "")

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.D)


def unmasked_pairs(S: int, T: int, causal: bool) -> int:
    """(query, key) pairs the mask keeps: all S·T, or t <= s for each of the S queries."""
    if not causal:
        return S * T
    full = min(S, T)                    # queries 0..full-1 see s + 1 keys, the rest all T
    return full * (full + 1) // 2 + (S - full) * T


def flops(w: Workload) -> int:
    """4·B·H·D per kept pair: q·k and p·v, a multiply and an add each."""
    return 4 * w.B * w.H * w.D * unmasked_pairs(w.S, w.T, w.causal)


SIZES = ((4, 16, 1024), (4, 16, 4096), (1, 16, 16384))     # (B, H, S = T)


def grouped_workloads() -> list[Workload]:
    """The issue's GQA grid: 32 query heads sharing 8 k, v heads, at S = T = 4096."""
    return [Workload(2, 32, 4096, 4096, D, causal, R=4) for D in (64, 128)
            for causal in (False, True)]


def workloads(quick: bool = False, grouped: bool = False) -> list[Workload]:
    if grouped:
        return grouped_workloads()
    if quick:
        return [Workload(4, 16, 1024, 1024, 128, False), Workload(4, 16, 1024, 1024, 128, True),
                Workload(4, 16, 4096, 4096, 64, False)]
    return [Workload(B, H, S, S, D, causal) for D in (64, 128) for B, H, S in SIZES
            for causal in (False, True)] + grouped_workloads()


def load_example(name: str):
    """An algorithm of examples/attention.py, loaded by path (bench/attention.py would
    shadow it on sys.path)."""
    spec = importlib.util.spec_from_file_location("plait_example_attention", EXAMPLE)
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[spec.name] = module
    return getattr(module, name)


def make_inputs(w: Workload, device="cuda", dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)

    def r(heads, n):
        return torch.randn(w.B, heads, n, w.D, generator=gen, device=device).to(dtype)
    return r(w.H, w.S), r(w.kv_heads, w.T), r(w.kv_heads, w.T)


def sdpa(backend_name: str, q, k, v, w: Workload):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION,
               "math": SDPBackend.MATH}[backend_name]

    def fn():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=w.causal, scale=w.scale, enable_gqa=w.R > 1)
    return fn


def example_for(w: Workload) -> str:
    """The examples/attention.py algorithm the workload runs."""
    name = "grouped_query_attention" if w.R > 1 else "attention"
    return "causal_" + name if w.causal else name


def grouped_view(q, w: Workload):
    """torch's q [B, H, S, D] as the grouped example takes it, [B, G, R, S, D] (a view)."""
    return q.view(w.B, w.kv_heads, w.R, *q.shape[2:]) if w.R > 1 else q


def plait_contender(q, k, v, w: Workload):
    import plait
    algo = load_example(example_for(w))
    qg = grouped_view(q, w)
    handle = plait.compile(algo, like=(qg, k, v), scale=w.scale)
    return lambda: handle(qg, k, v).view(q.shape)


def check(out, ref) -> float:
    """assert_close with bf16 tolerances, the absolute one relative to the output's scale
    (attention averages values: at T = 16384 its outputs are about 0.01); returns the
    max error relative to max |ref|."""
    out, ref = out.float(), ref.float()
    top = ref.abs().max().item()
    torch.testing.assert_close(out, ref, rtol=1.6e-2, atol=1.6e-2 * top)
    return (out - ref).abs().max().item() / top


def peak_mib(fn) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak / 2**20


def _failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


@dataclass
class Row:
    workload: Workload
    tflops: dict[str, float]            # median over the repeats, per contender that ran
    ratios: dict[str, list[float]]      # plait / peer, one per repeat
    mib: dict[str, float]
    notes: list[str]


def measure(w: Workload, repeat: int) -> Row:
    from timing import both
    q, k, v = make_inputs(w)
    fns, notes, mib = {}, [], {}
    for who in CONTENDERS:
        start = time.perf_counter()
        try:
            fn = plait_contender(q, k, v, w) if who == "plait" else sdpa(who, q, k, v, w)
            fn()                        # compiles, warms, and must not fail
            torch.cuda.synchronize()
            fns[who] = fn
            print(f"  {w.name:36s} {who:6s} ready in {time.perf_counter() - start:.1f} s",
                  flush=True)
        except Exception as exc:        # noqa: BLE001 - a failing contender is a row note
            print(f"  {w.name:36s} {who:6s} failed: {type(exc).__name__}: {exc}", flush=True)
            notes.append(f"{who}: {_failure(exc)}")
            torch.cuda.empty_cache()
    for who, fn in fns.items():
        mib[who] = peak_mib(fn)
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
            del ref
        else:
            notes.append("plait: unchecked, no SDPA backend ran")
    runs = []
    for _ in range(repeat):
        tf = {}
        for who, fn in fns.items():
            call, replay = both(fn)
            tf[who] = flops(w) / replay / 1e9
            print(f"  {w.name:36s} {who:6s} call {call:.4f} ms  replay {replay:.4f} ms "
                  f"{tf[who]:.0f} TFLOP/s  peak {mib[who]:.0f} MiB", flush=True)
        runs.append(tf)
    for note in notes:
        print(f"  {w.name:36s} {note}", flush=True)
    tflops = {who: statistics.median(r[who] for r in runs) for who in fns}
    ratios = {p: [r["plait"] / r[p] for r in runs] for p in PEERS
              if p in fns and "plait" in fns}
    return Row(w, tflops, ratios, mib, notes)


def header(peers=PEERS) -> str:
    ratios = [f"plait / {p}" for p in peers]
    return ("| workload | plait TFLOP/s | " + " | ".join(peers) + " | " + " | ".join(ratios)
            + " | " + " | ".join(f"spread of {r}" for r in ratios)
            + " | peak MiB " + " / ".join(("plait",) + tuple(peers)) + " |")


HEADER = header()


def table(rows: list[Row], stamp: str, peers=PEERS) -> str:
    """One markdown table (bench/chart.py draws its TFLOP/s columns) and the notes of
    failing contenders under it, numbered from the workload cell. Rows' ratios are per
    peer (plait / peer, one per repeat); bench/attention_masks.py passes its own peers."""
    head = header(peers)
    contenders = ("plait",) + tuple(peers)
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    notes = []

    def fig(d, who, fmt="{:.0f}"):
        return fmt.format(d[who]) if who in d else "-"
    for row in rows:
        name = row.workload.name
        for note in row.notes:
            notes.append(note)
            name += f" [{len(notes)}]"
        ratio = [f"{statistics.median(row.ratios[p]):.2f}" if p in row.ratios else "-"
                 for p in peers]
        spread = [f"{min(row.ratios[p]):.2f}-{max(row.ratios[p]):.2f}" if p in row.ratios
                  else "-" for p in peers]
        mem = " / ".join(fig(row.mib, who) for who in contenders)
        lines.append(f"| {name} | " + " | ".join(fig(row.tflops, who) for who in contenders)
                     + " | " + " | ".join(ratio + spread) + f" | {mem} |")
    text = stamp + "\n\n" + "\n".join(lines)
    if notes:
        text += "\n\n" + "\n".join(f"[{i}] {n}" for i, n in enumerate(notes, 1))
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--grouped", action="store_true", help="only the GQA workloads")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    import triton
    rows = []
    for w in workloads(args.quick, args.grouped):
        rows.append(measure(w, args.repeat))
        torch.cuda.empty_cache()
    cudnn = torch.backends.cudnn.version()
    stamp = (f"{datetime.date.today()} · {torch.cuda.get_device_name()} · torch "
             f"{torch.__version__} · cuDNN {cudnn} · triton {triton.__version__} · bf16 · "
             f"CUDA graph replay medians (do_bench), {args.repeat} repeat(s)")
    text = table(rows, stamp)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
        from chart import chart_if_possible
        chart_if_possible(args.out)


if __name__ == "__main__":
    main()
