"""`plait tune`: its options and what it does with them.

    plait tune FILE.py[:NAME] --shape ... [--budget S] [--workers N] [--gpus N] [--fresh]
               [--cluster ADDRESS|auto] [--out DIR] [--force]
    plait tune --export FILE | --import FILE

Every search is filed in the tuning database (runtime/tune_db.py); a repeat of the same
algorithm, target, driver and shape bucket is answered from it unless --fresh. The
candidates are spread over every visible GPU of the host (one worker process each,
runtime/tune_workers.py) or, with --cluster, over a Ray cluster (runtime/tune_cluster.py,
the `plait[cluster]` extra).
"""
from __future__ import annotations

from pathlib import Path

from plait.dsl.errors import PlaitError


def add_tune_parser(sub, common) -> None:
    tune = sub.add_parser("tune", help="search the contraction and streamed-kernel schedules on "
                          "the GPU and write the fastest correct one as "
                          "schedules/<arch>/<algorithm>.yaml")
    common(tune, many=True)
    tune.add_argument("--budget", type=float, default=120.0, metavar="SECONDS",
                      help="stop trying candidates after this long (default 120)")
    tune.add_argument("--out", default="schedules", metavar="DIR",
                      help="where <arch>/<algorithm>.yaml goes (default: ./schedules)")
    tune.add_argument("--force", action="store_true", help="overwrite an existing file")
    tune.add_argument("--workers", type=int, default=4, help="compile processes (default 4)")
    tune.add_argument("--gpus", type=int, metavar="N", help="time on N of the visible GPUs, "
                      "one worker process each (default: all of them)")
    tune.add_argument("--generic", action="store_true", help="search the generic kernels' "
                      "threads, vectors and prefetch too (by default only when no kernel "
                      "runs on tensor cores or streams); measures again")
    tune.add_argument("--fresh", action="store_true", help="measure again, even where the "
                      "tuning database has this search")
    tune.add_argument("--cluster", metavar="ADDRESS|auto", help="spread the search over a Ray "
                      "cluster (pip install \"plait[cluster]\")")
    tune.add_argument("--export", metavar="FILE", help="write the tuning database's results "
                      "to FILE (.json, or .yaml)")
    tune.add_argument("--import", dest="import_file", metavar="FILE",
                      help="add the results in FILE (written by --export) to the database")
    tune.set_defaults(func=cmd_tune)


def _moves(args) -> list[str]:
    from .tune_db import TuneDB
    from .tune_db_files import export_results, import_results
    lines = []
    if args.import_file:
        n = import_results(TuneDB(), args.import_file)
        lines.append(f"imported {n} search{'es' * (n != 1)} from {args.import_file}")
    if args.export:
        n = export_results(TuneDB(), args.export)
        lines.append(f"exported {n} search{'es' * (n != 1)} to {args.export}")
    return lines


def _evaluator(args):
    """The worker pool over this host's GPUs, the Ray cluster, or None (one process)."""
    if args.cluster:
        from .tune_cluster import ClusterPool
        return ClusterPool(args.file, address=args.cluster)
    from .tune_workers import WorkerPool, visible_devices
    devices = visible_devices()
    if args.gpus is not None:
        if not 1 <= args.gpus <= len(devices):
            raise PlaitError(f"--gpus: {args.gpus}, but {len(devices)} GPU(s) are visible")
        devices = devices[:args.gpus]
    return WorkerPool(args.file, devices=devices) if len(devices) > 1 else None


def cmd_tune(args) -> int:
    from . import api, driver
    from .cli import _dtypes, _sizes
    from .loading import load_algorithm
    from .tune import gpu_runner, gpu_timer
    from .tune_output import target_path, write_schedule, write_shapes_schedule
    from .tune_recall import tune_or_recall
    from .tune_shapes import tune_shapes
    for line in _moves(args):
        print(line)
    if args.file is None:
        if args.export or args.import_file:
            return 0
        raise PlaitError("plait tune needs FILE.py[:NAME] (or --export / --import FILE)")
    if args.cluster:                         # a clear error before any GPU work
        from .tune_cluster import require_ray
        require_ray()
    algo = load_algorithm(args.file)
    api.use_gpu("gpu", True)                # a clear error without a GPU
    arch = api.gpu_target()
    target_path(Path(args.out), algo.name, arch, args.force)   # refused before any work
    dtypes = _dtypes(algo, args, api.resolve_schedule(algo, args.schedule, arch))
    shapes = [_sizes(algo, text, "gpu") for text in args.shape or [""]]
    graph = algo.graph(dtypes)
    name, _, version = driver.device_name().partition(", driver ")
    try:
        from tqdm import tqdm

        def progress(items, total):
            return tqdm(items, total=total, desc=f"tuning {algo.name}", unit="schedule")
    except ImportError:                      # the bar is the `tune` extra
        progress = None
    evaluator = _evaluator(args)
    recalled = []

    def search(algo_, sizes, dtypes_, target, runner, timer, budget_s, **kw):
        result, hit = tune_or_recall(algo_, sizes, dtypes_, target, runner, timer, budget_s,
                                     fresh=args.fresh or args.generic,
                                     driver=version or "unknown", gpu=name,
                                     evaluator=evaluator, **kw)
        recalled.append(hit)
        return result
    common = dict(algo_spec=args.file, workers=args.workers, progress=progress,
                  generic=True if args.generic else None)
    # made on first use: an answer from the database touches no CUDA context
    runner, timer = _lazy(lambda: gpu_runner(algo, graph)), _lazy(lambda: gpu_timer(algo))
    try:
        if len(shapes) > 1:
            sr = tune_shapes(algo, shapes, dtypes, arch, runner, timer, args.budget,
                             search=search, **common)
            path = write_shapes_schedule(Path(args.out), sr, driver.device_name(), dtypes,
                                         args.force)
            worst = max(sr.costs, key=lambda c: c.sacrifice)
            print(f"one schedule for {len(shapes)} shapes, at most "
                  f"{100 * worst.sacrifice:.1f}% slower than a shape's own best: {path}")
            return 0
        result = search(algo, shapes[0], dtypes, arch, runner, timer, args.budget, **common)
    finally:
        if evaluator is not None:
            evaluator.close()
    path = write_schedule(Path(args.out), result, driver.device_name(), dtypes, args.force)
    best = result.best
    source = " (from the tuning database; --fresh measures again)" if all(recalled) else ""
    print(f"best {best.ms:.4f} ms, default {result.default_ms:.4f} ms{source}: {path}")
    return 0



def _lazy(make):
    made = []

    def call(*args):
        if not made:
            made.append(make())
        return made[0](*args)
    return call
