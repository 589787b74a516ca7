"""Training-step time of a LayerNorm + gated MLP block under DistributedDataParallel: one GPU
against two (NCCL, one process per GPU, spawned as torchrun would), with plait and with
what a user would pick instead, in one run.

    python bench/ddp_step.py [--dim 2048 --hidden 5632 --rows 8192 --dtype bf16 --world 2]

The model is tests/torch_interop/ddp_training.GatedBlock at bench sizes. Contenders:
`plait_ops` (plait.torch_op for the norm and the silu gate, eager torch for the rest),
`plait_compile` (plain torch under torch.compile(backend="plait")), `torch_eager` and
`torch_compile` (inductor). Weak scaling: every GPU trains on --rows rows per step, so
ideal scaling keeps the step time; `scaling` is the one-GPU step time over the N-GPU one
(1.0 is ideal: the all-reduce of the gradients is hidden behind the backward), and rows/s
counts all GPUs. The one-GPU figure is the model without DDP. A step is zero_grad, forward,
an MSE loss, backward (with DDP's all-reduce) and an SGD step; after --warmup steps,
--steps are timed one by one with CUDA events, and the median (the slowest rank's) is
reported.
"""
import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "torch_interop"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from ddp_training import GatedBlock, free_port, spawn_ranks  # noqa: E402

CONTENDERS = ("plait_ops", "plait_compile", "torch_eager", "torch_compile")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def build(contender: str, args, device, ddp_world: int):
    """(the callable a step runs, the module whose parameters train, the DDP module)."""
    torch.manual_seed(0)
    model = GatedBlock(contender == "plait_ops", dim=args.dim, hidden=args.hidden)
    model = model.to(device, DTYPES[args.dtype])
    wrapped = model
    if ddp_world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        wrapped = DDP(model, device_ids=[torch.device(device).index])
    if contender == "plait_compile":
        wrapped = torch.compile(wrapped, backend="plait")
    elif contender == "torch_compile":
        wrapped = torch.compile(wrapped)
    return wrapped, model


def step_times(contender: str, args, device, world: int) -> list[float]:
    """Milliseconds of each timed step on this process's GPU."""
    run, model = build(contender, args, device, world)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=device).manual_seed(1 + torch.device(device).index)
    x = torch.randn(args.rows, args.dim, device=device, generator=gen).to(DTYPES[args.dtype])
    target = torch.randn_like(x)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(run(x).float(), target.float()).backward()
        opt.step()
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def rank_main(rank: int, world: int, port: int, args, out_dir: str) -> None:
    """One process of the N-GPU run: every contender, median step time of the slowest rank."""
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        medians = {}
        for contender in args.contenders:
            torch._dynamo.reset()
            median = torch.tensor(statistics.median(
                step_times(contender, args, f"cuda:{rank}", world)), device=f"cuda:{rank}")
            dist.all_reduce(median, op=dist.ReduceOp.MAX)
            medians[contender] = median.item()
        if rank == 0:
            torch.save(medians, os.path.join(out_dir, "medians.pt"))
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=5632)
    ap.add_argument("--rows", type=int, default=8192, help="rows per GPU per step")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--world", type=int, default=2, help="GPUs of the N-GPU run")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    args = ap.parse_args()
    if torch.cuda.device_count() < args.world:
        sys.exit(f"ddp_step: needs {args.world} CUDA GPUs, this machine has "
                 f"{torch.cuda.device_count()}")
    import tempfile
    one = {}
    for contender in args.contenders:      # one GPU, no DDP, in this process
        torch._dynamo.reset()
        one[contender] = statistics.median(step_times(contender, args, "cuda:0", 1))
    with tempfile.TemporaryDirectory() as out:
        spawn_ranks(rank_main, args.world, (args.world, free_port(), args, out),
                    timeout_s=1800)
        many = torch.load(os.path.join(out, "medians.pt"))
    print(f"# DDP training step, {torch.cuda.get_device_name()} x {args.world}, "
          f"torch {torch.__version__}; dim {args.dim}, hidden {args.hidden}, "
          f"{args.rows} rows per GPU, {args.dtype}\n")
    print("| contender | 1 GPU ms | rows/s | "
          f"{args.world} GPUs ms | rows/s | scaling |")
    print("|---|---|---|---|---|---|")
    for c in args.contenders:
        t1, tn = one[c], many[c]
        print(f"| {c} | {t1:.3f} | {args.rows / t1 * 1e3:,.0f} | {tn:.3f} | "
              f"{args.world * args.rows / tn * 1e3:,.0f} | {t1 / tn:.2f} |")


if __name__ == "__main__":
    main()
