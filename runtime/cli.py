"""The `plait` command.

    plait run FILE.py[:NAME] [--schedule S] [--device auto|cpu|gpu] [--shape M=1000,N=3001]
              [--dtype bf16] [--scalar eps=1e-6] [--seed 0] [--target sm_90a]
    plait compile FILE.py[:NAME] [--schedule S] [--target sm_90a] [--dump DIR] [--shape ...]
    plait grad FILE.py[:NAME] [--wrt x,w]
    plait cache info|list|clear [--dir DIR]

`run` makes seeded random inputs, runs the algorithm and checks it against the
float64 reference on the same (rounded) inputs; its last line is
`ok max_rel_err=<e> time_ms=<t>` (exit 0) or `FAIL <why>` (exit 1). NaN and inf must
sit where the reference has them; where they do, a `note:` line before the last says so,
and where they do not, a `where:` line before the FAIL gives their count and the first.
An axis of size 0 (`--shape N=0`) runs no kernel: see lowering/graph/empty_axes.py.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback

from plait.dsl.errors import PlaitError
from plait.lowering.target import DEFAULT_TARGET

from . import cli_report
from .loading import default_sizes, load_algorithm, make_inputs, parse_pairs


def _common(p: argparse.ArgumentParser, shapes: bool = True, many: bool = False) -> None:
    p.add_argument("file", metavar="FILE.py[:NAME]", nargs="?" if many else None,
                   help="the algorithm's file, and its name when the file holds several")
    if shapes:
        p.add_argument("--schedule", help="schedule file (YAML or .py) or folder to search")
        if many:
            p.add_argument("--shape", action="append", metavar="AXIS=N,...",
                           help="axis extents; given several times, one schedule for all "
                           "(the least geometric-mean loss; the file says each shape's)")
        else:
            # several --shape options add up (the last one alone would win in silence)
            p.add_argument("--shape", action="append", metavar="AXIS=N,...",
                           help="axis extents; may be given several times")
        p.add_argument("--dtype", help="storage dtype of every input that declares none (else "
                       "the schedule's, else bf16 for a contraction, fp32 otherwise)")
        p.add_argument("--scalar", default="", metavar="NAME=V,...", help="scalar arguments")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plait", description="plait: tensor algorithms + "
                                     "schedules compiled to GPU kernels")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run on random inputs and check against the reference")
    _common(run)
    run.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    run.add_argument("--target", help="GPU arch to compile for (default: the GPU's)")
    run.add_argument("--seed", type=int, default=0)
    run.set_defaults(func=cmd_run)
    comp = sub.add_parser("compile", help="compile ahead of time; --dump writes every IR stage")
    _common(comp)
    comp.add_argument("--target", default=DEFAULT_TARGET)
    comp.add_argument("--dump", metavar="DIR", help="write DIR/<NN>_<stage>.txt and the PTX")
    comp.set_defaults(func=cmd_compile)
    grad = sub.add_parser("grad", help="print the gradient algorithm as DSL source")
    _common(grad, shapes=False)
    grad.add_argument("--wrt", default="", metavar="X,W", help="arguments to differentiate "
                      "with respect to (default: every float tensor)")
    grad.set_defaults(func=cmd_grad)
    cache = sub.add_parser("cache", help="the compile cache: info (location, entries, size, "
                           "compiler fingerprint), list, clear")
    cache.add_argument("action", choices=("info", "list", "clear"))
    cache.add_argument("--dir", help="cache folder (default: $PLAIT_CACHE_DIR, else "
                       "$XDG_CACHE_HOME/plait, else ~/.cache/plait)")
    cache.set_defaults(func=cmd_cache)
    from .cli_tune import add_tune_parser
    add_tune_parser(sub, _common)
    return parser


def _dtypes(algo, args, schedule) -> dict:
    """Storage dtype per tensor argument: a declared dtype (Tensor["M", "bf16"]) is kept;
    otherwise --dtype, else the schedule's policy, else the algorithm's natural default:
    bf16 where it has a contraction (what tensor cores take), fp32 elsewhere."""
    from plait.dsl.dtypes import DType, dtype_of
    from plait.lowering.graph.contraction import find_contractions
    out = {}
    try:
        forced = dtype_of(args.dtype) if args.dtype else None
    except ValueError as e:
        raise PlaitError(f"--dtype: {e}") from None
    natural = DType.BF16 if find_contractions(algo.graph()) else DType.FP32
    for p in algo.tensor_params:
        if p.dtype is not None:
            out[p.name] = p.dtype
        elif forced is not None:
            out[p.name] = forced
        elif schedule is not None and schedule.dtypes.storage_of(p.name) is not None:
            out[p.name] = schedule.dtypes.storage_of(p.name)
        else:
            out[p.name] = natural
    return out


def _sizes(algo, text: str | list[str] | None, device: str) -> dict[str, int]:
    if isinstance(text, list):
        text = ",".join(text)
    sizes = default_sizes(algo.axis_order, small=(device == "cpu"))
    for axis, value in parse_pairs(text, "--shape").items():
        if axis not in sizes:
            raise PlaitError(f"--shape: {algo.name} has no axis {axis!r} "
                             f"(its axes: {', '.join(algo.axis_order)})")
        try:
            sizes[axis] = int(value)
        except ValueError:
            raise PlaitError(f"--shape: {axis}={value} is not an integer") from None
        if sizes[axis] < 0:        # 0 is an empty axis: the host gives the outputs
            raise PlaitError(f"--shape: {axis}={value} must be a non-negative integer")
    return sizes


def _scalars(algo, text: str) -> dict[str, float]:
    given = {}
    for k, v in parse_pairs(text, "--scalar").items():
        try:
            given[k] = float(v)
        except ValueError:
            raise PlaitError(f"--scalar: {k}={v} is not a number") from None
    names = {p.name for p in algo.params if not p.is_tensor}
    for name in given:
        if name not in names:
            raise PlaitError(f"--scalar: {algo.name} has no scalar argument {name!r}")
    for p in algo.params:
        if not p.is_tensor and p.default is None and p.name not in given:
            raise PlaitError(f"{algo.name} needs scalar {p.name!r}: pass --scalar {p.name}=V")
    return given


def _check_target(target: str | None) -> None:
    """--target: one of the targets plait compiles for (PlaitError listing them)."""
    if target:
        from plait.lowering.target import get_target
        get_target(target)


def available_memory() -> int | None:
    """Bytes of memory available now (MemAvailable on Linux), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_memory(algo, graph, dtypes, sizes) -> None:
    """Refuse, before allocating, inputs + outputs + float64 reference that cannot fit."""
    from plait.dsl.dtypes import dtype_of
    total = 0
    for p in algo.tensor_params:     # generated in float64, then rounded to storage
        total += math.prod(sizes[a] for a in p.axes) * (8 + dtypes[p.name].itemsize)
    for node in graph.outputs.values():   # the result, and the reference's float64 copy
        n = math.prod(sizes.get(a, 1) for a in node.axes)
        total += n * (8 + dtype_of(node.dtype).itemsize)
    free = available_memory()
    if free is not None and total > free:
        shape = ",".join(f"{a}={n}" for a, n in sizes.items())
        raise PlaitError(f"--shape {shape}: inputs, outputs and reference need "
                         f"{total / 2**30:.1f} GiB, but only {free / 2**30:.1f} GiB of memory "
                         "is available")


def cmd_run(args) -> int:
    from plait.dsl.dtypes import dtype_of
    from plait.dsl.reference import evaluate

    from . import api
    import numpy as np
    from .tolerance import max_rel_err, nonfinite_mismatch, nonfinite_note, tolerance
    _check_target(args.target)
    if args.seed < 0:                 # numpy's generator takes no negative seed
        raise PlaitError(f"--seed: {args.seed} must be a non-negative integer")
    algo = load_algorithm(args.file)
    gpu = api.use_gpu(args.device, False)
    arch = args.target or (api.gpu_target() if gpu else api.DEFAULT_TARGET)
    schedule = api.resolve_schedule(algo, args.schedule, arch)
    dtypes = _dtypes(algo, args, schedule)
    sizes = _sizes(algo, args.shape, "gpu" if gpu else "cpu")
    scalars = _scalars(algo, args.scalar)
    graph = algo.graph(dtypes)
    _check_memory(algo, graph, dtypes, sizes)
    inputs = make_inputs(algo, dtypes, sizes, args.seed)
    device = "gpu" if gpu else "cpu"

    def once():
        return api.run(algo, schedule=schedule, device=device, target=args.target,
                       **inputs, **scalars)
    start = time.perf_counter()
    result = once()
    elapsed = time.perf_counter() - start
    if gpu:   # the first call compiled; time a second one (numpy out: it waits for the GPU)
        start = time.perf_counter()
        result = once()
        elapsed = time.perf_counter() - start
    outputs = _as_dict(list(graph.outputs), result)
    with np.errstate(all="ignore"):     # a 0/0 of the algorithm's is a NaN to compare
        reference = evaluate(graph, {**inputs, **scalars})
    used = list(dtypes.values()) + [dtype_of(o.dtype) for o in outputs.values()]
    if schedule is not None and schedule.dtypes.compute is not None:
        used.append(schedule.dtypes.compute)
    tol = tolerance(used)
    errors = {name: max_rel_err(outputs[name], reference[name]) for name in graph.outputs}
    worst = max(errors.values())
    shape = " ".join(f"{a}={n}" for a, n in sizes.items())
    print(f"{algo.name} on {device} ({arch}), {shape}, "
          f"schedule {getattr(schedule, 'source', None) or ('given' if schedule else 'default')}")
    for line in cli_report.kernel_paths(graph, schedule, sizes, True, arch):
        print(line)
    if not worst <= tol:   # also catches NaN
        bad = ", ".join(f"{n}={e:.3g}" for n, e in errors.items())
        for name in graph.outputs:    # NaN or inf where the reference differs: say where
            where = nonfinite_mismatch(name, outputs[name], reference[name])
            if where:
                print(f"where: {where}")
        print(f"FAIL max_rel_err={worst:.3g} > tolerance {tol:g} ({bad})")
        return 1
    for name in graph.outputs:    # agreeing NaN or inf: say so, nothing was compared there
        note = nonfinite_note(name, outputs[name])
        if note:
            print(note)
    print(f"ok max_rel_err={worst:.3g} time_ms={elapsed * 1e3:.3f}")
    return 0


def _as_dict(names: list[str], result) -> dict:
    import numpy as np
    if isinstance(result, dict):
        values = result
    elif isinstance(result, tuple):
        values = dict(zip(names, result))
    else:
        values = {names[0]: result}
    return {n: np.asarray(values[n]) for n in names}


def cmd_compile(args) -> int:
    from . import api
    _check_target(args.target)
    algo = load_algorithm(args.file)
    schedule = api.resolve_schedule(algo, args.schedule, args.target)
    dtypes = _dtypes(algo, args, schedule)
    sizes = _sizes(algo, args.shape, "gpu")
    graph = algo.graph(dtypes)
    if args.dump:
        for path in cli_report.dump(args.dump, graph, schedule, sizes, args.target):
            print(path)
    program = api.compile(algo, dtypes, sizes, schedule=schedule, target=args.target)
    for k in program.kernels:
        grid = " ".join(f"{a}/{t}" for a, t in k.grid) or "1"
        print(f"kernel {k.name}: entry {k.entry}, {k.threads} threads, grid {grid}")
    for line in cli_report.wave_lines(program, sizes, args.target, api._multiprocessors()):
        print(line)
    for line in cli_report.ptxas_lines(program, args.target):
        print(line)
    return 0


def cmd_grad(args) -> int:
    from plait.autodiff import grad, to_source
    algo = load_algorithm(args.file)
    wrt = [w.strip() for w in args.wrt.split(",") if w.strip()] or None
    print(to_source(grad(algo, wrt=wrt)))
    return 0


def cmd_cache(args) -> int:
    from . import cache_admin
    if args.action == "info":
        lines = cache_admin.info_lines(args.dir)
    elif args.action == "list":
        lines = cache_admin.list_lines(args.dir)
    else:
        where = cache_admin.folder(args.dir)
        removed = cache_admin.clear(where)
        lines = [f"removed {p}" for p in removed]
        lines.append(f"removed {len(removed)} file{'s' * (len(removed) != 1)} from {where}")
    for line in lines:
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as e:
        if not isinstance(e, (PlaitError, MemoryError)):   # a bug, not a user error
            traceback.print_exc()
        message = " | ".join(str(e).splitlines())   # the verdict stays on one line
        if not message.strip():           # never an empty error: say what was raised
            message = f"{type(e).__name__} {e!r}"
        if args.command == "run":
            sys.stdout.flush()
            print(f"FAIL {type(e).__name__}: {message}")
        else:
            print(f"plait {args.command}: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
