"""A small training step under torch DistributedDataParallel, shared by the DDP tests (CPU over
gloo, GPU over NCCL) and bench/ddp_step.py.

    spawn_ranks(run_rank, 2, (2, free_port(), "gloo", "cpu", list(SCENARIOS), out_dir))
    # each rank saved {scenario: {"params", "stats", ...}} to out_dir/rank<r>.pt
    one = one_process(SCENARIOS["ops"], "cpu")          # the same on the whole batch

The model is a LayerNorm, a projection and a gated MLP with a residual (`GatedBlock`). Its
norm and gate activation are plait.torch_op ops (`plait_ops=True`), or plain torch that
torch.compile(backend="plait") turns into plait regions. Each rank starts from its own
seed (DDP broadcasts rank 0's parameters and buffers) and trains on its shard of each batch;
`one_process` trains rank 0's initial model on the whole batch, which DDP must reproduce:
every loss is a mean over equal shards, so DDP's average of the ranks' gradients is the
gradient of the whole batch.
"""
from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

DIM, HIDDEN, ROWS = 37, 53, 52      # odd sizes, no tile multiple; ROWS splits 2 ranks x 2 micro
EPS, LR = 1e-5, 0.1
SEED = 100                          # rank r starts from SEED + r; the reference from SEED
BUCKET_MB = 0.01                    # about 10 KB: several buckets (the graph is split at them)


@dataclass(frozen=True)
class Scenario:
    plait_ops: bool                 # plait.torch_op for the norm and activation, else plain torch
    compiled: bool                  # torch.compile(backend="plait") around the DDP module
    steps: int = 2                  # optimizer steps
    micro: int = 1                  # micro-batches per step, all but the last under no_sync
    unused: bool = False            # a parameter forward never uses (find_unused_parameters)
    ddp: dict = field(default_factory=dict)     # more DistributedDataParallel arguments
    # torch._dynamo.config.optimize_ddp: True splits the compiled graph at DDP's buckets
    # (DDPOptimizer); "python_reducer" compiles it whole and the backward with compiled
    # autograd, which runs DDP's reducer in Python
    optimize_ddp: object = True


SCENARIOS = {
    "ops": Scenario(True, False, ddp={"gradient_as_bucket_view": True}),
    "compiled": Scenario(False, True),
    "ops_no_sync": Scenario(True, False, steps=1, micro=2, unused=True,
                            ddp={"find_unused_parameters": True}),
    "compiled_no_sync": Scenario(False, True, steps=1, micro=2, unused=True,
                                 ddp={"find_unused_parameters": True}),
    # plait's ops inside the plait backend's graph, the backward under compiled autograd
    "ops_compiled_python_reducer": Scenario(True, True, optimize_ddp="python_reducer"),
}


def plait_layers():
    """(layernorm, swiglu) as torch ops (registered once per process)."""
    import plait
    from layernorm import layernorm
    from swiglu import swiglu
    return plait.torch_op(layernorm), plait.torch_op(swiglu)


class GatedBlock(torch.nn.Module):
    """x + down(silu(gate(y)) * up(y)), y = proj(layernorm(x)) * scale (a buffer)."""

    def __init__(self, plait_ops: bool, unused: bool = False, dim: int = DIM,
                 hidden: int = HIDDEN):
        super().__init__()
        self.norm_w = torch.nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.norm_b = torch.nn.Parameter(0.1 * torch.randn(dim))
        self.proj = torch.nn.Linear(dim, dim)
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.up = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim)
        self.register_buffer("scale", 0.5 + torch.rand(dim))    # DDP broadcasts rank 0's
        if unused:
            self.spare = torch.nn.Linear(dim, dim)               # gets no gradient
        self.ops = plait_layers() if plait_ops else None

    def forward(self, x):
        if self.ops is not None:
            layernorm, swiglu = self.ops
            y = self.proj(layernorm(x, self.norm_w, self.norm_b, EPS)) * self.scale
            return x + self.down(swiglu(self.gate(y), self.up(y)))
        y = self.proj(F.layer_norm(x, self.norm_w.shape, self.norm_w, self.norm_b, EPS))
        y = y * self.scale
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def make_model(s: Scenario, seed: int, device) -> GatedBlock:
    torch.manual_seed(seed)
    return GatedBlock(s.plait_ops, s.unused).to(device)


def batches(steps: int, device, dtype=torch.float32):
    """(inputs, targets), each [steps, ROWS, DIM], the same on every rank."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(steps, ROWS, DIM, generator=g, dtype=torch.float64)
    t = torch.randn(steps, ROWS, DIM, generator=g, dtype=torch.float64)
    return x.to(device, dtype), t.to(device, dtype)


def train(model, params, s: Scenario, x, t, ddp=None) -> None:
    """SGD steps on x[step], t[step]; with s.micro > 1 the gradients of the micro-batches
    accumulate, those before the last under ddp.no_sync() (no all-reduce)."""
    opt = torch.optim.SGD(params, lr=LR)
    for step in range(x.shape[0]):
        opt.zero_grad(set_to_none=True)
        xs, ts = x[step].chunk(s.micro), t[step].chunk(s.micro)
        for i in range(s.micro):
            last = i == s.micro - 1
            with contextlib.nullcontext() if ddp is None or last else ddp.no_sync():
                loss = F.mse_loss(model(xs[i]), ts[i]) / s.micro
                loss.backward()
        opt.step()


def compile_plait(model, device):
    """torch.compile with the plait backend; on CPU tensors opting in to the CPU executor."""
    options = {"cpu": True} if torch.device(device).type == "cpu" else None
    return torch.compile(model, backend="plait", options=options)


def _aot_graphs() -> int:
    from torch._dynamo.utils import counters
    return counters["aot_autograd"]["total"]


def one_process(s: Scenario, device) -> dict:
    """Rank 0's initial model trained on the whole batch in this process (no DDP); a
    no_sync scenario's reference is one step on the whole batch, without micro-batches."""
    import plait.runtime.torch_backend as backend
    if s.compiled:
        torch._dynamo.reset()
    ref = Scenario(s.plait_ops, s.compiled, s.steps, 1, s.unused)
    model = make_model(ref, SEED, device)
    run = compile_plait(model, device) if s.compiled else model
    x, t = batches(ref.steps, device)
    backend.reset_stats()
    train(run, model.parameters(), ref, x, t)
    return {"params": _state(model), "stats": backend.stats()}


def float64_reference(s: Scenario) -> dict:
    """The same training in float64 plain torch on the CPU: an independent reference."""
    ref = Scenario(False, False, s.steps, 1, s.unused)
    model = make_model(ref, SEED, "cpu").double()
    x, t = batches(ref.steps, "cpu", torch.float64)
    train(model, model.parameters(), ref, x, t)
    return {"params": _state(model)}


def _state(model) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def run_scenario(s: Scenario, rank: int, world: int, device) -> dict:
    """One scenario on this rank: DDP from this rank's seed, trained on its shard."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import plait.runtime.torch_backend as backend
    if s.compiled:
        torch._dynamo.reset()       # each scenario compiles its own model afresh
    model = make_model(s, SEED + rank, device)
    ids = [torch.device(device).index] if torch.device(device).type == "cuda" else None
    # torch's DDPOptimizer (which splits a compiled graph at DDP's buckets) assumes DDP's
    # first bucket holds 1 MiB, while DDP given bucket_cap_mb caps the first bucket by it
    # too: without this, torch.compile of a DDP module with buckets under 1 MiB fails in
    # torch's own assertion ("First bucket should be smaller/equal to other buckets").
    first, dist._DEFAULT_FIRST_BUCKET_BYTES = dist._DEFAULT_FIRST_BUCKET_BYTES, \
        int(BUCKET_MB * 2**20)
    try:
        with torch._dynamo.config.patch(optimize_ddp=s.optimize_ddp):
            ddp = DDP(model, device_ids=ids, bucket_cap_mb=BUCKET_MB, **s.ddp)
            run = compile_plait(ddp, device) if s.compiled else ddp
            x, t = batches(s.steps, device)
            shard = slice(rank * ROWS // world, (rank + 1) * ROWS // world)
            backend.reset_stats()
            graphs = _aot_graphs()
            train(run, model.parameters(), s, x[:, shard], t[:, shard], ddp)
    finally:
        dist._DEFAULT_FIRST_BUCKET_BYTES = first
    return {"params": _state(model), "stats": backend.stats(),
            "aot_graphs": _aot_graphs() - graphs, "plait_backwards": _backwards_built(model)}


def _backwards_built(model) -> dict:
    """Per plait op of the model and input set differentiated, how many compiled handles its
    backward op keeps (a handle is built at the op's first call: a backward that ran)."""
    if model.ops is None:
        return {}
    return {(op.algorithm.name, wrt): len(back.handles.handles)
            for op in model.ops for wrt, back in op.backwards.variants.items()}


def run_rank(rank: int, world: int, port: int, backend_name: str, device_kind: str,
             names, out_dir: str) -> None:
    """A spawned process: join the group, run each scenario of `names`, save the results
    to out_dir/rank<rank>.pt. Collectives time out after a minute (a hang fails)."""
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    device = "cpu"
    if device_kind == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend_name, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        results = {name: run_scenario(SCENARIOS[name], rank, world, device) for name in names}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def assert_plait_ran(s: Scenario, got: dict) -> None:
    """What one rank's result of scenario `s` must show: with torch.compile, regions ran
    through plait and none fell back to torch (a refused region would still give torch's
    answer); with plait.torch_op, the ops' backwards ran."""
    if s.compiled:
        stats = got["stats"]
        assert stats.get("region_calls", 0) > 0, stats
        assert stats.get("fallback_calls", 0) == 0 and stats.get("regions_refused", 0) == 0, \
            stats
        if s.optimize_ddp is True:      # DDPOptimizer split the graph at the buckets:
            assert got["aot_graphs"] > 1, got["aot_graphs"]     # an AOT graph per part
    if s.plait_ops:                     # x needs no gradient: the norm's backward took
        built = got["plait_backwards"]  # w and b alone
        assert built[("layernorm", ("w", "b"))] > 0, built
        assert built[("swiglu", ("g", "u"))] > 0, built


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn_ranks(entry, world: int, args: tuple, timeout_s: float) -> None:
    """Run entry(rank, *args) in `world` spawned processes; raise when one fails or when
    they have not all finished after timeout_s (then they are terminated), so that a hung
    collective fails instead of blocking."""
    import time

    import torch.multiprocessing as mp
    ctx = mp.start_processes(entry, args=args, nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=1.0):       # raises ProcessRaisedException on a failure
            if time.monotonic() > deadline:
                raise TimeoutError(f"{world} DDP ranks still running after {timeout_s:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
                p.join(5)
