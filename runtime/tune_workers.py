"""Every GPU of a host tunes: one worker process per visible device.

    with WorkerPool("examples/matmul.py:matmul") as pool:
        result = tune(algo, sizes, dtypes, target, None, None, evaluator=pool)

Each worker is spawned (a forked CUDA context is unusable), sees only its own device
(CUDA_VISIBLE_DEVICES set before anything touches the driver), loads the algorithm from
its file, and builds its runner and timer with `make(algo, graph, target)` (default
`gpu_pair`: `tune.gpu_runner` and `tune.gpu_timer`; a test passes a stand-in). The
candidates are handed out one at a time to whichever worker is free; each is run, checked
against the float64 reference and only then timed, in the worker, as `tune` does in one
process; the answers come back into the one TuneResult the caller files.

A worker that dies mid-run (killed, out of memory, a crashed driver) loses nothing: the
candidate it held goes back to the queue for another worker. A candidate that has killed
two workers is not handed out again (it is marked so), and when every worker is dead the
rest are marked not tried.
"""
from __future__ import annotations

import collections
import math
import os
import time
from multiprocessing.connection import wait

from plait.dsl.errors import PlaitError

from .tune import Trial, check_and_time, schedule_of

MAX_DEATHS = 2          # a candidate that kills this many workers is given up


def visible_devices() -> list[int]:
    """The devices this process may use: CUDA_VISIBLE_DEVICES's count, else the driver's."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return list(range(len([d for d in listed.split(",") if d.strip()])))
    from . import driver
    return list(range(driver.device_count())) if driver.gpu_available() else []


def gpu_pair(algo, graph, target):
    """The device's runner and timer (the default `make`)."""
    from .tune import gpu_runner, gpu_timer
    return gpu_runner(algo, graph), gpu_timer(algo)


def _serve(conn, device, algo_spec: str, make, checking) -> None:
    """A worker's life: set up, then answer (index, keys) jobs until told to stop."""
    if device is not None:                  # before the driver is first touched
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [d.strip() for d in visible.split(",")] if visible else None
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[device] if ids else str(device)
    try:
        from plait.dsl.dtypes import dtype_of

        from .loading import load_algorithm
        algo = load_algorithm(algo_spec)
        graph = algo.graph({k: dtype_of(v) for k, v in checking.dtypes.items()})
        runner, timer = make(algo, graph, checking.target)
    except Exception as e:                  # the caller says why, instead of a dead pool
        conn.send(("fatal", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        job = conn.recv()
        if job is None:
            return
        index, keys = job
        trial = Trial(None)
        try:
            if keys is None:               # the default schedule: timed only
                trial.ms = timer(None, checking.inputs)
            else:
                trial = Trial(keys.get("contraction"), kernels=keys.get("kernels"))
                schedule = schedule_of(graph, trial.contraction, trial.kernels)
                check_and_time(trial, schedule, runner, timer, checking)
        except Exception as e:             # reported against the candidate, worker lives on
            trial.error = f"worker: {type(e).__name__}: {e}"
        conn.send((index, trial.error, trial.rel_err, trial.ms))


class _Worker:
    def __init__(self, ctx, device, algo_spec, make, checking):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, device, algo_spec, make,
                                                         checking), daemon=True)
        self.process.start()
        child.close()
        self.job: int | None = None          # the job index it holds
        self.pid: int | None = None


class WorkerPool:
    """An evaluator for `tune` (its `default_ms` and `evaluate`) over worker processes:
    one per device in `devices` (default: every visible one), or `workers` stand-ins
    with no device of their own (tests)."""

    def __init__(self, algo_spec: str, make=gpu_pair, devices: list | None = None,
                 workers: int | None = None):
        if workers is not None:
            devices = [None] * workers
        elif devices is None:
            devices = visible_devices()
        if not devices:
            raise PlaitError("plait tune: no GPU is visible to spread the candidates over")
        self.algo_spec, self.make, self.devices = algo_spec, make, list(devices)
        self._workers: list[_Worker] = []
        self._checking = None
        self.deaths = 0                       # workers lost so far (tests read it)
        self.pids: list[int] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in self._workers:
            w.process.join(5)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
        self._workers, self._checking = [], None

    def _start(self, checking) -> None:
        if self._checking is checking and any(w.process.is_alive() for w in self._workers):
            return
        self.close()
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self._workers = [_Worker(ctx, d, self.algo_spec, self.make, checking)
                         for d in self.devices]
        for w in self._workers:
            try:
                tag, detail = w.conn.recv()
            except EOFError:
                tag, detail = "fatal", f"exit code {w.process.exitcode}"
            if tag != "ready":
                self.close()
                raise PlaitError(f"plait tune: a worker could not start ({detail})")
            w.pid = detail
        self.pids = [w.pid for w in self._workers]
        self._checking = checking

    def default_ms(self, checking) -> float | None:
        trial = Trial(None)
        self._run([(trial, None)], checking, math.inf)
        return trial.ms

    def evaluate(self, trials: list, checking, deadline: float, progress=None) -> None:
        self._run([(t, t.keys) for t in trials], checking, deadline, progress)

    def _run(self, jobs: list, checking, deadline: float, progress=None) -> None:
        self._start(checking)
        bar = iter(progress(range(len(jobs)), len(jobs))) if progress else None
        pending = collections.deque(range(len(jobs)))
        deaths = collections.Counter()
        while True:
            alive = [w for w in self._workers if w.process.is_alive() or w.job is not None]
            for w in alive:
                if w.job is None and pending and time.monotonic() <= deadline:
                    w.job = pending.popleft()
                    w.conn.send((w.job, jobs[w.job][1]))
            busy = [w for w in alive if w.job is not None]
            if not busy:
                break
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for w in busy:
                answer = None
                if w.conn in ready or w.process.sentinel in ready:
                    try:
                        answer = w.conn.recv() if w.conn.poll() else None
                    except (EOFError, OSError):
                        answer = None
                if answer is not None:
                    _fill(jobs[answer[0]][0], answer[1:])
                    w.job = None
                    if bar is not None:
                        next(bar, None)
                elif w.process.sentinel in ready:        # died holding a candidate
                    self._lost(w, jobs, pending, deaths)
        for index in pending:
            trial = jobs[index][0]
            trial.error = "not tried: over the time budget" if any(
                w.process.is_alive() for w in self._workers) else \
                "not tried: every tuning worker died"

    def _lost(self, w: _Worker, jobs, pending, deaths) -> None:
        w.process.join()
        self.deaths += 1
        index, w.job = w.job, None
        self._workers.remove(w)
        deaths[index] += 1
        if deaths[index] >= MAX_DEATHS:
            jobs[index][0].error = (f"worker: killed {MAX_DEATHS} tuning workers (exit code "
                                    f"{w.process.exitcode}); not tried again")
        else:
            pending.appendleft(index)


def _fill(trial: Trial, answer) -> None:
    trial.error, trial.rel_err, trial.ms = answer
