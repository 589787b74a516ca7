"""Tuning over a Ray cluster: `plait tune FILE --cluster ADDRESS|auto` (`plait[cluster]`).

Each candidate is first compiled by a task on a CPU worker (filling the compile cache
the timing then hits); then it is run, checked against the float64 reference and timed
by one of the timing actors, one per GPU of the cluster (each holds `num_gpus=1`), as
`tune` does in one process. A candidate whose compile task or actor is lost (a node gone,
a killed process) is retried elsewhere; one that has killed two actors is given up.

Ray is imported only here, and only when a cluster is asked for: `import plait` and
`plait tune --help` never import it, and without it `--cluster` says how to install it.
"""
from __future__ import annotations

import collections
import math
import time

from plait.dsl.errors import PlaitError

from .tune import Trial

MAX_DEATHS = 2


def require_ray():
    """The ray module, or a PlaitError saying how to get it."""
    try:
        import ray
    except ImportError:
        raise PlaitError('plait tune --cluster needs Ray: pip install "plait[cluster]"') \
            from None
    return ray


class _Timing:
    """A timing actor's body: set up once, then answer one candidate at a time."""

    def __init__(self, algo_spec: str, make, checking):
        from plait.dsl.dtypes import dtype_of

        from .loading import load_algorithm
        self.algo = load_algorithm(algo_spec)
        self.graph = self.algo.graph({k: dtype_of(v) for k, v in checking.dtypes.items()})
        self.checking = checking
        self.runner, self.timer = make(self.algo, self.graph, checking.target)

    def ready(self) -> bool:
        return True

    def trial(self, keys):
        from .tune import check_and_time, schedule_of
        trial = Trial(None)
        try:
            if keys is None:
                trial.ms = self.timer(None, self.checking.inputs)
            else:
                trial = Trial(keys.get("contraction"), kernels=keys.get("kernels"))
                schedule = schedule_of(self.graph, trial.contraction, trial.kernels)
                check_and_time(trial, schedule, self.runner, self.timer, self.checking)
        except Exception as e:
            trial.error = f"worker: {type(e).__name__}: {e}"
        return trial.error, trial.rel_err, trial.ms


def _compile(algo_spec: str, checking, keys) -> str | None:
    from .tune import _compile_one
    return _compile_one((algo_spec, checking.dtypes, checking.sizes, keys, checking.target))


class ClusterPool:
    """An evaluator for `tune` over Ray. `actors`: how many timing actors (default: one
    per GPU of the cluster); `gpus_per_actor` 1 on the device, 0 for stand-ins in tests;
    `compile_ahead`: a CPU task compiles each candidate before it is timed."""

    def __init__(self, algo_spec: str, make=None, address: str | None = "auto",
                 actors: int | None = None, gpus_per_actor: float = 1,
                 compile_ahead: bool = True):
        self.ray = require_ray()
        if not self.ray.is_initialized():
            self.ray.init(address=address)
        if make is None:
            from .tune_workers import gpu_pair as make
        if actors is None:
            actors = int(self.ray.cluster_resources().get("GPU", 0))
            if actors < 1:
                raise PlaitError(f"plait tune --cluster {address}: the cluster has no GPU")
        self.algo_spec, self.make, self.count = algo_spec, make, actors
        self.gpus, self.compile_ahead = gpus_per_actor, compile_ahead
        self.actors: list = []
        self._checking = None
        self.deaths = 0

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors, self._checking = [], None

    def _start(self, checking) -> None:
        if self._checking is checking and self.actors:
            return
        self.close()
        cls = self.ray.remote(num_gpus=self.gpus, num_cpus=1, max_restarts=0)(_Timing)
        self.actors = [cls.remote(self.algo_spec, self.make, checking)
                       for _ in range(self.count)]
        try:                      # an actor that cannot set up says why, here
            self.ray.get([a.ready.remote() for a in self.actors])
        except self.ray.exceptions.RayActorError as e:
            self.close()
            raise PlaitError("plait tune --cluster: a timing actor could not start ("
                             + " | ".join(str(e).splitlines()[-3:]) + ")") from None
        self._checking = checking

    def default_ms(self, checking) -> float | None:
        trial = Trial(None)
        self._run([(trial, None)], checking, math.inf)
        return trial.ms

    def evaluate(self, trials: list, checking, deadline: float, progress=None) -> None:
        jobs = [(t, t.keys) for t in trials]
        if self.compile_ahead and jobs:
            task = self.ray.remote(num_cpus=1, max_retries=3)(_compile)
            ref = self.ray.put(checking)
            errors = self.ray.get([task.remote(self.algo_spec, ref, keys) for _, keys in jobs])
            for (trial, _), err in zip(jobs, errors):
                if err is not None:
                    trial.error = f"compile: {err}"
            jobs = [(t, k) for t, k in jobs if t.error is None]
        self._run(jobs, checking, deadline, progress)

    def _run(self, jobs: list, checking, deadline: float, progress=None) -> None:
        self._start(checking)
        ray = self.ray
        bar = iter(progress(range(len(jobs)), len(jobs))) if progress else None
        pending = collections.deque(range(len(jobs)))
        deaths = collections.Counter()
        idle, running = list(self.actors), {}      # future -> (actor, job index)
        while pending or running:
            while idle and pending and time.monotonic() <= deadline:
                actor, index = idle.pop(), pending.popleft()
                running[actor.trial.remote(jobs[index][1])] = (actor, index)
            if not running:
                break
            done, _ = ray.wait(list(running), num_returns=1)
            actor, index = running.pop(done[0])
            try:
                answer = ray.get(done[0])
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError):
                self.deaths += 1
                self.actors.remove(actor)
                deaths[index] += 1
                if deaths[index] >= MAX_DEATHS:
                    jobs[index][0].error = f"worker: killed {MAX_DEATHS} timing actors; " \
                        "not tried again"
                else:
                    pending.appendleft(index)
                continue
            jobs[index][0].error, jobs[index][0].rel_err, jobs[index][0].ms = answer
            idle.append(actor)
            if bar is not None:
                next(bar, None)
        for index in pending:
            jobs[index][0].error = "not tried: over the time budget" if self.actors else \
                "not tried: every timing actor died"
