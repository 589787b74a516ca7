"""Training-step time of a LLaMA-style block (tests/torch_interop/backend_models.Block), or of
a GPT-2-style model (backend_models.GPT2: embeddings, LayerNorm, causal SDPA, GELU-tanh MLP,
LM head and cross-entropy), in bf16: torch.compile(backend="plait") against
backend="inductor" and eager, in one process.

    python bench/torch_backend.py [--dim 1024 --heads 8 --hidden 2816 --batch 4 --seq 512]
    python bench/torch_backend.py --model gpt2 [--dim 768 --heads 12 --vocab 50304 --layers 2]

A step is forward, a scalar loss and backward (parameter gradients). Each backend's first
steps compile and are not timed; then `triton.testing.do_bench` (median, L2 flushed)
times steps. The table gives ms per step and each figure's ratio to eager, and the plait
line says how many regions ran through plait and how many fell back. Small sizes
(e.g. --dim 128 --heads 2 --hidden 352 --batch 1 --seq 16) make a step host-bound:
then the figures are the host's cost per step. `--profile` prints cProfile's view of
20 plait steps.
"""
import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "torch_interop"))
from backend_models import GPT2, Block  # noqa: E402

import plait.runtime.torch_backend as plait_backend  # noqa: E402


def step_fn(model, x, targets=None):
    """One training step: a block's loss is its output's mean square; GPT-2's is its
    cross-entropy against `targets`."""
    def step():
        for p in model.parameters():
            p.grad = None
        loss = model(x).float().pow(2).mean() if targets is None else model(x, targets)
        loss.backward()
    return step


def make_model(args, device="cuda"):
    """(model in bf16, its inputs) for --model."""
    if args.model == "gpt2":
        model = GPT2(args.vocab, args.seq, args.dim, args.heads, args.layers)
        idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
        targets = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
        return model.to(device).to(torch.bfloat16), (idx, targets)
    model = Block(args.dim, args.heads, args.hidden)
    x = torch.randn(args.batch, args.seq, args.dim, device=device, dtype=torch.bfloat16)
    return model.to(device).to(torch.bfloat16), (x,)


def profile(step, steps: int = 20) -> None:
    """Where the host's time goes in a plait step (the GPU runs behind it)."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    torch.cuda.synchronize()
    print(f"cProfile of {steps} plait steps (host time; cumulative includes callees):")
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("block", "gpt2"), default="block")
    ap.add_argument("--vocab", type=int, default=50304, help="gpt2: vocabulary size")
    ap.add_argument("--layers", type=int, default=2, help="gpt2: blocks")
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2816)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--rep", type=int, default=200, help="do_bench rep (ms)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile 20 plait steps: the host's view of regions and torch")
    args = ap.parse_args()
    from triton.testing import do_bench

    torch.manual_seed(0)
    base, inputs = make_model(args)
    rows = []
    for name in ("eager", "inductor", "plait"):
        torch._dynamo.reset()
        plait_backend.reset_stats()
        model = copy.deepcopy(base)
        run = model if name == "eager" else torch.compile(model, backend=name)
        step = step_fn(run, *inputs)
        for _ in range(3):                    # compile and warm up
            step()
        torch.cuda.synchronize()
        ms = do_bench(step, rep=args.rep, return_mode="median")
        rows.append((name, ms, plait_backend.stats() if name == "plait" else None))
        if args.profile and name == "plait":
            profile(step)
    eager_ms = rows[0][1]
    what = f"GPT-2-style model ({args.layers} blocks, V{args.vocab})" if args.model == "gpt2" \
        else f"LLaMA-style block (hidden {args.hidden})"
    print(f"{what} bf16 train step: B{args.batch} T{args.seq} D{args.dim} H{args.heads}; "
          f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'backend':<10} {'ms/step':>9} {'vs eager':>9}")
    for name, ms, _ in rows:
        print(f"{name:<10} {ms:9.3f} {eager_ms / ms:8.2f}x")
    print("plait regions:", rows[2][2])


if __name__ == "__main__":
    main()
