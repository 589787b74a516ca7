"""The tuning database in use: a repeated search answered from it, and `plait.run`'s
opt-in use of a tuned schedule.

`tune_or_recall` files every search it runs (runtime/tune_db.py) and answers a repeat of
the same algorithm, target, driver and shape bucket from the file: nothing is compiled or
timed (`fresh=True`, `plait tune --fresh`, measures again).

`plait.run` uses a tuned entry only when PLAIT_TUNED=1 is set (read when a call shape is
first compiled), no schedule is given and no schedule file is found for the algorithm and
target: then the fastest checked candidate of the call's shape bucket, if any, is used.
Opt-in, because a result measured on another GPU or driver may not be the best here, and
a run whose schedule changes with the contents of a cache file is hard to reproduce.
"""
from __future__ import annotations

import os

from .tune import tune
from .tune_db import TuneDB, TuneMeta

ENV = "PLAIT_TUNED"


def tune_or_recall(algo, sizes: dict, dtypes: dict, target: str, runner, timer,
                   budget_s: float = 60.0, *, db: TuneDB | None = None, fresh: bool = False,
                   driver: str = "none", gpu: str = "unknown", search=tune, **kwargs):
    """(TuneResult, whether it came from the database). `search` is `tune`'s signature
    (the worker pool passes its own)."""
    db = db if db is not None else TuneDB()
    meta = TuneMeta.of(algo.graph(dtypes), algo.name, sizes, dtypes, target, driver, gpu)
    if fresh:
        db.forget(meta)
    else:
        hit = db.result(meta)
        if hit is not None:
            return hit, True
    result = search(algo, sizes, dtypes, target, runner, timer, budget_s, **kwargs)
    db.store(result, meta)
    return result, False


def tuned_schedule(algo, graph, sizes: dict, target: str):
    """The database's fastest checked schedule for this call's shape bucket, when
    PLAIT_TUNED=1; None otherwise or when there is none."""
    if os.environ.get(ENV, "") not in ("1", "true", "yes"):
        return None
    keys = TuneDB().best_keys(graph, target, sizes)
    if keys is None:
        return None
    from plait.schedule.model import Schedule
    from plait.schedule.validate import validate
    schedule = Schedule.from_dict({"algorithm": algo.name, **keys},
                                  source="<tuning database>")
    validate(schedule, graph)
    return schedule
