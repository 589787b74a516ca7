"""`plait tune`: search the schedule space of an algorithm's kernels at given shapes.

    result = tune(algo, sizes, dtypes, target, runner, timer, budget_s=60)

Order of work: the candidates come from the target table (its instructions, their tile
tables, stages that fit its shared memory, rasters, persistence); each is validated and
lowered, so that an invalid one is refused with its reason and never compiled; the
valid ones are compiled in parallel processes (filling the disk cache the runs then hit);
each is run and checked against the float64 reference before it is timed; the fastest
correct one wins. The runner and the timer are parameters: `gpu_runner`/`gpu_timer` on
the device (CUDA-graph replays with L2 flushed), anything with the same signature in a
test. `runtime/tune_output.py` writes the winner as a schedule file with its provenance.

Tuned: the top-level `contraction:` key (every contraction kernel of the algorithm),
each streamed kernel's rows per block, keys per step and rows per warp (`kernels: {name:
{grid, stream, warps}}`; attention forward and backward), and the generic kernels' block
threads, vector width and prefetch (`tune_generic.py`; by default when the algorithm has
no tensor-core or streamed kernel, `generic=True` / `--generic` always). Several kernels
are tuned one at a time, the others at their defaults, and the best of each are then
tried together (their times add up). One process times them, or one worker per GPU of
the host (`tune_workers.py`).
"""
from __future__ import annotations

import itertools
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from plait.dsl.errors import PlaitError

from .tolerance import max_rel_err, tolerance

STAGES = (3, 4, 5)
RASTERS = (4, 8, 16)


@dataclass
class Trial:
    contraction: dict | None          # the schedule's contraction: key, by axis names
    error: str | None = None          # why it was refused, failed or was wrong
    rel_err: float | None = None
    ms: float | None = None
    kernels: dict | None = None       # or the streamed kernels' keys, by kernel name

    @property
    def keys(self) -> dict:
        """The schedule's top-level keys this trial sets."""
        return {"contraction": self.contraction} if self.contraction is not None else \
            {"kernels": self.kernels}


@dataclass
class TuneResult:
    algorithm: str
    target: str
    sizes: dict
    default_ms: float | None
    trials: list = field(default_factory=list)

    @property
    def ranked(self) -> list:
        return sorted((t for t in self.trials if t.ms is not None), key=lambda t: t.ms)

    @property
    def best(self) -> Trial | None:
        return self.ranked[0] if self.ranked else None


def contraction_roles(graph, sizes, target) -> tuple[str, str] | None:
    """The axes playing M and N in the algorithm's first tensor-core kernel at these
    sizes (tiles are given by axis name), or None when no kernel reaches tensor cores."""
    from plait.lowering.gemm.plan import GemmProgram
    from plait.lowering.pipeline import lower
    for t in lower(graph, None, sizes, True, target).threads:
        if isinstance(t, GemmProgram):
            return t.m, t.n
    return None


def candidates(graph, sizes, target) -> list[dict]:
    """The contraction keys to try on `target`: each of its instructions' tiles x stages x
    rasters (x persistence for wgmma); the lowering refuses what does not fit."""
    from plait.lowering.gemm.tiles import MMA_TILES, WGMMA_TILES
    from plait.lowering.target import get_target
    roles = contraction_roles(graph, sizes, target)
    if roles is None:
        raise PlaitError(f"{graph.name}: no kernel runs on tensor cores at these sizes on "
                         f"{target}; plait tune searches contraction schedules only")
    m, n = roles
    out = []
    for instruction in get_target(target).instructions:
        tiles = WGMMA_TILES if instruction == "wgmma" else MMA_TILES
        persist = (True, False) if instruction == "wgmma" else (None,)
        for (tm, tn, _), stages, raster, p in itertools.product(tiles, STAGES, RASTERS, persist):
            key = {"instruction": instruction, "tile": {m: tm, n: tn}, "stages": stages,
                   "raster": raster}
            if p is not None:
                key["persistent"] = p
            out.append(key)
    return out


STREAM_ROWS = (64, 128)
STREAM_KEYS = (32, 64, 128)          # 128 only where every width is at most 64
ROWS_PER_WARP = (16, 32)


def stream_candidates(graph, sizes, target) -> list[dict]:
    """`kernels:` keys to try for the streamed kernels: rows per block x keys per step x
    rows per warp for each, and for a kernel whose sums another kernel's loop can add up
    (dq), that; with several kernels, one kernel's variants at a time."""
    from plait.lowering.pipeline import lower
    from plait.lowering.stream.plan import StreamKernel
    streamed = [t for t in lower(graph, None, sizes, True, target).threads
                if isinstance(t, StreamKernel)]
    out = []
    for t in streamed:
        narrow = max(w for _, w in t.widths) <= 64
        for rows, keys, per_warp in itertools.product(STREAM_ROWS, STREAM_KEYS, ROWS_PER_WARP):
            if keys == 128 and not narrow or rows % per_warp:
                continue
            out.append({t.name: {"grid": {t.rows_axis: rows}, "stream": {t.keys_axis: keys},
                                 "warps": rows // per_warp}})
        if _may_accumulate(graph, sizes, target, t.name):
            out.append({t.name: {"reduction": "atomic"}})
    return out


def _may_accumulate(graph, sizes, target, name: str) -> bool:
    """Can streamed kernel `name`'s sums be added up in another kernel's loop instead
    (`reduction: atomic`, attention's dq in the dk/dv kernel)?"""
    from plait.lowering.pipeline import lower
    try:
        low = lower(graph, schedule_of(graph, kernels={name: {"reduction": "atomic"}}), sizes,
                    True, target)
    except PlaitError:
        return False
    return any(k.name == name and k.stream is None for k in low.kernel_graph.kernels)


def schedule_of(graph, contraction: dict | None = None, kernels: dict | None = None):
    from plait.schedule.model import Schedule
    from plait.schedule.validate import validate
    keys = {"contraction": contraction} if contraction is not None else {"kernels": kernels}
    s = Schedule.from_dict({"algorithm": graph.name, **keys}, source="<tune>")
    validate(s, graph)
    return s


def refuse_invalid(graph, sizes, target, keys: list) -> tuple[list[Trial], list[Trial]]:
    """(valid trials, refused trials with the reason): each candidate (a contraction key
    or a Trial) is validated and lowered, never compiled, before it counts as valid."""
    from plait.lowering.pipeline import lower
    valid, refused = [], []
    for key in keys:
        trial = key if isinstance(key, Trial) else Trial(key)
        try:
            lower(graph, schedule_of(graph, trial.contraction, trial.kernels), sizes, True,
                  target)
            valid.append(trial)
        except PlaitError as e:
            trial.error = str(e)
            refused.append(trial)
    return valid, refused


def _compile_one(args) -> str | None:
    """In a worker process: compile one candidate into the disk cache; the error or None."""
    algo_spec, dtypes, sizes, keys, target = args
    from plait.runtime import api
    from plait.runtime.loading import load_algorithm
    algo = load_algorithm(algo_spec)
    try:
        api.compile(algo, dtypes, sizes, schedule={"algorithm": algo.name, **keys},
                    target=target)
    except PlaitError as e:
        return str(e)
    return None


def compile_all(algo_spec: str | None, dtypes, sizes, trials, target, workers: int) -> None:
    """Compile the trials in `workers` processes (spawned: a forked CUDA context is not
    usable); a compile error marks its trial. Without a file spec, nothing is done ahead
    (the runs compile as they go)."""
    if algo_spec is None or workers < 2 or not trials:
        return
    import multiprocessing
    jobs = [(algo_spec, {k: str(v) for k, v in dtypes.items()}, sizes, t.keys, target)
            for t in trials]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for trial, err in zip(trials, pool.map(_compile_one, jobs)):
            if err is not None:
                trial.error = f"compile: {err}"


@dataclass
class Checking:
    """What a candidate is run on and checked against (sent whole to a worker process)."""
    algorithm: str
    target: str
    sizes: dict
    dtypes: dict                       # argument name -> dtype name
    inputs: dict
    reference: dict
    tol: float


def check_and_time(trial: Trial, schedule, runner, timer, checking: Checking) -> None:
    """Run the candidate, compare each output with the float64 reference, and time it
    only when it is correct; the trial says what happened."""
    try:
        out = runner(schedule, checking.inputs)
    except PlaitError as e:
        trial.error = f"run: {e}"
        return
    trial.rel_err = max(max_rel_err(out[o], checking.reference[o]) for o in checking.reference)
    if not trial.rel_err <= checking.tol:
        trial.error = f"wrong: max_rel_err {trial.rel_err:.3g} over {checking.tol:g}"
        return
    trial.ms = timer(schedule, checking.inputs)


class InProcess:
    """Candidates run, checked and timed one after another in this process (one GPU).
    runtime/tune_workers.py spreads them over processes with the same two methods."""

    def __init__(self, runner, timer, graph):
        self.runner, self.timer, self.graph = runner, timer, graph

    def default_ms(self, checking: Checking) -> float | None:
        return self.timer(None, checking.inputs)

    def evaluate(self, trials: list, checking: Checking, deadline: float, progress=None):
        for trial in (progress(trials, len(trials)) if progress else trials):
            if time.monotonic() > deadline:
                trial.error = "not tried: over the time budget"
                continue
            schedule = schedule_of(self.graph, trial.contraction, trial.kernels)
            check_and_time(trial, schedule, self.runner, self.timer, checking)


def make_checking(algo, graph, sizes: dict, dtypes: dict, target: str, seed: int) -> Checking:
    """Seeded random inputs (rounded to their storage dtypes) and the float64 reference."""
    from plait.dsl.reference import evaluate
    rng = np.random.default_rng(seed)
    inputs = {p.name: rng.standard_normal([sizes[a] for a in p.axes]).astype(np.float32)
              .astype(dtypes[p.name].numpy) for p in algo.tensor_params}
    reference = evaluate(graph, inputs)
    tol = tolerance(list(dtypes.values()) + [n.dtype for n in graph.outputs.values()])
    return Checking(algo.name, target, dict(sizes), {k: str(v) for k, v in dtypes.items()},
                    inputs, {o: reference[o] for o in graph.outputs}, tol)


def tune(algo, sizes: dict, dtypes: dict, target: str, runner, timer, budget_s: float = 60.0,
         seed: int = 0, algo_spec: str | None = None, workers: int = 1,
         progress=None, evaluator=None, generic: bool | None = None) -> TuneResult:
    """Search as the module docstring says. `runner(schedule, inputs) -> {output: array}`
    runs one candidate (schedule None: the default) and `timer(schedule, inputs) -> ms`
    times it; `progress(iterable, total)` wraps the loop (a tqdm bar on the CLI).
    `evaluator` runs, checks and times the candidates (default: `InProcess(runner, timer)`;
    `tune_workers.WorkerPool` spreads them over a host's GPUs). `generic`: search the
    generic kernels' keys too (`tune_generic.py`); None: only when no kernel runs on
    tensor cores or streams."""
    from .tune_generic import generic_candidates
    graph = algo.graph(dtypes)
    checking = make_checking(algo, graph, sizes, dtypes, target, seed)
    evaluator = evaluator or InProcess(runner, timer, graph)
    streams = [Trial(None, kernels=k) for k in stream_candidates(graph, sizes, target)]
    try:
        keys = candidates(graph, sizes, target)
    except PlaitError:
        keys = []
    if generic or (generic is None and not keys and not streams):
        streams += [Trial(None, kernels=k) for k in generic_candidates(graph, sizes, target)]
    if not keys and not streams:
        raise PlaitError(f"{graph.name}: no kernel schedule to search at these sizes on "
                         f"{target}")
    valid, refused = refuse_invalid(graph, sizes, target, keys + streams)
    result = TuneResult(algo.name, target, dict(sizes), evaluator.default_ms(checking), refused)
    compile_all(algo_spec, dtypes, sizes, valid, target, workers)
    deadline = time.monotonic() + budget_s
    result.trials.extend(valid)
    evaluator.evaluate([t for t in valid if t.error is None], checking, deadline, progress)
    together = best_of_each_kernel(result.trials)
    if together is not None:
        result.trials.append(together)
        evaluator.evaluate([together], checking, deadline)
    return result


def best_of_each_kernel(trials) -> Trial | None:
    """Streamed kernels were tuned one at a time: each one's fastest variant, together
    (None with fewer than two kernels tuned)."""
    best: dict[str, Trial] = {}
    for t in trials:
        if t.kernels is not None and t.ms is not None:
            (name,) = t.kernels
            if name not in best or t.ms < best[name].ms:
                best[name] = t
    if len(best) < 2:
        return None
    return Trial(None, kernels={name: t.kernels[name] for name, t in best.items()})


# ---- on the GPU -------------------------------------------------------------------------

def _cuda_inputs(inputs: dict) -> dict:
    import torch
    return {k: _to_torch(v) if v.dtype.kind == "V" else torch.from_numpy(np.asarray(v)).cuda()
            for k, v in inputs.items()}


def gpu_runner(algo, graph):
    """Run a candidate with plait.run on CUDA tensors; outputs back as float32 numpy."""
    import plait
    names = list(graph.outputs)

    def run(schedule, inputs):
        out = plait.run(algo, schedule=schedule, **_cuda_inputs(inputs))
        if not isinstance(out, dict):
            out = dict(zip(names, out if isinstance(out, tuple) else (out,)))
        return {k: v.float().cpu().numpy() for k, v in out.items()}
    return run


def _to_torch(a):
    """A numpy array of a narrow float (ml_dtypes) as a CUDA tensor of the same dtype."""
    import torch
    names = {"bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn,
             "float8_e5m2": torch.float8_e5m2}
    return torch.from_numpy(a.astype(np.float32)).cuda().to(names[a.dtype.name])


def gpu_timer(algo, repeats: int = 50):
    """Median ms of CUDA-graph replays of plait.run, the L2 flushed before each."""
    import torch

    import plait
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")   # > the H200's L2

    def time_it(schedule, inputs):
        args = _cuda_inputs(inputs)
        for _ in range(3):
            plait.run(algo, schedule=schedule, **args)     # compile, warm up
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plait.run(algo, schedule=schedule, **args)
        times = []
        for _ in range(repeats):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return float(np.median(times))
    return time_it
