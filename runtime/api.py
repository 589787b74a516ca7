"""`plait.run` and `plait.runtime.api.compile`: from arrays to a launched (or emulated) program.
(`plait.compile(algo, like=...)`, the handle a hot loop calls, is runtime/compiled.py.)

    y = plait.run(layernorm, x, w, b)              # numpy, torch or CuPy arrays in, same out
    y = plait.run(layernorm, x, w, b, eps=1e-6, schedule="my_schedules/", device="cpu")

Order of work, everything checkable checked before anything runs: bind the
arguments by the algorithm's parameters; describe each array (dtype, shape,
contiguity); trace the graph for those dtypes; bind axis sizes; resolve the
schedule; refuse dtypes the schedule does not store; then compile (cached) and
launch on the GPU, or run the CPU executor.
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
from pathlib import Path

import numpy as np

from plait.dsl.errors import PlaitError
from plait.dsl.axis_sizes import derive_sizes
from plait.dsl.reference import bind_sizes

from . import arrays, binding
from . import cache as program_cache

from plait.lowering.limits import check_grids
from plait.lowering.target import DEFAULT_TARGET, get_target  # the target table
DEVICES = ("auto", "cpu", "gpu")
_programs: dict[tuple, object] = {}   # (graph, schedule, sizes, aligned, target) -> Program
_PROGRAMS_KEPT = 256
# Per-call fast paths keyed by object identity (the objects are kept alive in the value,
# so an id is never reused while its entry stands).
_by_identity: dict[tuple, tuple] = {}


# ---------------------------------------------------------------- schedule and device

_resolved: dict[tuple, object] = {}   # (graph, schedule argument, arch) -> validated Schedule


def _schedule_key(schedule):
    if schedule is None or isinstance(schedule, (str, os.PathLike)):
        return ("path", os.fspath(schedule) if schedule is not None else None)
    return ("object", id(schedule))


def resolve_schedule(algo, schedule, arch: str, graph=None):
    """An explicit Schedule, a dict, a YAML/Python file, a folder to search, or None (lookup).

    None from the lookup means: the compiler's default heuristic. Lookups and
    validation are remembered per process (`clear_schedule_cache()` forgets them), so
    that plait.run costs microseconds, not a directory walk, on every call.
    """
    key = (id(graph), _schedule_key(schedule), arch, algo.name)
    hit = _resolved.get(key)
    if hit is not None and hit[0] is graph and hit[1] is schedule:
        return hit[2]
    found = _resolve_schedule(algo, schedule, arch, graph)
    if not isinstance(schedule, dict):       # a dict may be edited in place between calls
        _resolved[key] = (graph, schedule, found)
    return found


def clear_schedule_cache() -> None:
    _resolved.clear()


def _resolve_schedule(algo, schedule, arch: str, graph=None):
    from plait.schedule.lookup import find_schedule
    from plait.schedule.model import Schedule
    if schedule is None:
        found = find_schedule(algo.name, arch)
    elif isinstance(schedule, Schedule):
        found = schedule
    elif isinstance(schedule, dict):
        found = Schedule.from_dict(schedule, source="<dict>")
    elif isinstance(schedule, (str, os.PathLike)):
        path = Path(schedule)
        if path.is_dir():
            found = find_schedule(algo.name, arch, (path,))
            if found is None:
                raise PlaitError(f"no schedule for {algo.name} on {arch} (or its fallbacks) in "
                                 f"{path}; expected e.g. {path / arch / (algo.name + '.yaml')}")
        elif path.is_file():
            from plait.schedule.loader import load_schedule
            found = load_schedule(path)
        else:
            raise PlaitError(f"schedule {str(path)!r}: no such file or folder")
    else:
        raise PlaitError(f"schedule must be a Schedule, a dict, a file or a folder, not "
                         f"{type(schedule).__name__}")
    if found is not None:
        from plait.schedule.errors import ScheduleError
        from plait.schedule.validate import validate
        try:
            validate(found, graph)
        except ScheduleError as e:
            if schedule is not None:
                raise                 # the user's own schedule: its errors are theirs
            # Found by name alone: another algorithm's schedule that shares the name (a
            # user's `softmax` over other axes) is not this one's. Say so; use the default.
            import warnings
            from plait.dsl.errors import PlaitWarning
            warnings.warn(PlaitWarning(
                f"{algo.name}: the schedule found by name ({found.source}) does not fit this "
                f"algorithm ({' | '.join(str(e).splitlines())}); using the default schedule"),
                stacklevel=3)
            return None
    return found


def use_gpu(device: str, arrays_on_device: bool) -> bool:
    """Whether to run on the GPU for device='auto' | 'cpu' | 'gpu'."""
    from . import driver
    if device not in DEVICES:
        raise PlaitError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    if device == "cpu":
        return False
    if device == "gpu" or arrays_on_device:
        driver.require_gpu()         # a CudaError that says why not
        return True
    return driver.gpu_available()


def gpu_target(device: int = 0) -> str:
    from plait.schedule.lookup import arch_of_capability

    from . import driver
    return arch_of_capability(*driver.device_capability(device))


# ---------------------------------------------------------------- compiling

_fingerprint: list[str] = []


def compiler_fingerprint() -> str:
    """sha256 of the compiler's own source, so that a changed compiler misses the disk cache
    even while plait.__version__ stays the same (as it does during development)."""
    if not _fingerprint:
        _fingerprint.append(source_fingerprint(Path(__file__).resolve().parent.parent))
    return _fingerprint[0]


def source_fingerprint(root: Path, folders=("dsl", "schedule", "lowering")) -> str:
    """sha256 over every .py under the folders, subfolders included, named by relative path
    (a moved or nested file must never serve stale kernels)."""
    h = hashlib.sha256()
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


@functools.cache
def _multiprocessors() -> int | None:
    """The SMs of the device kernels will run on (a `wave` grid tile spreads over them);
    without a GPU, None: the lowering plans for the target's figure."""
    from . import driver
    return driver.multiprocessors() if driver.gpu_available() else None


def lowering_switches() -> tuple:
    """The lowering's switches read from the environment (each changes what a program
    compiles to, so the in-process memos are keyed by them)."""
    from plait.lowering.graph import stream_split
    from plait.lowering.ir import shifted_rows, simt_reload
    from plait.lowering.target import STREAM_WGMMA_SWITCH
    return (shifted_rows.enabled(), simt_reload.enabled(),
            os.environ.get(STREAM_WGMMA_SWITCH), stream_split.enabled())


def get_program(graph, schedule, sizes: dict[str, int], aligned: bool, target: str):
    """The compiled Program: from this process's memo, the disk cache, or the compiler."""
    import plait
    from plait.lowering import pipeline
    sms = _multiprocessors()
    switches = lowering_switches()
    fast = (id(graph), id(schedule), tuple(sizes.items()), aligned, target, sms, switches)
    hit = _by_identity.get(fast)
    if hit is not None and hit[0] is graph and hit[1] is schedule:
        return hit[2]
    sched_dict = schedule.to_dict() if schedule is not None else None
    memo = (graph.text(), repr(sched_dict), tuple(sorted(sizes.items())), aligned, target, sms,
            switches)
    if memo in _programs:
        _by_identity[fast] = (graph, schedule, _programs[memo])
        return _programs[memo]
    key_parts = {
        "graph": graph.text(),
        "schedule": sched_dict,
        "specialization": pipeline.specialization_key(graph, schedule, sizes, aligned, target,
                                                      sms),
        "target": target,
        "version": plait.__version__,
        "compiler": compiler_fingerprint(),
    }
    program = program_cache.get_or_build(
        key_parts, lambda: pipeline.compile_program(graph, schedule, sizes, aligned, target,
                                                    sms))
    # A program built for other sizes may not launch.
    check_grids(program, sizes, sms or get_target(target).sms)
    if len(_programs) >= _PROGRAMS_KEPT:
        _programs.pop(next(iter(_programs)))
    _programs[memo] = program
    if len(_by_identity) >= _PROGRAMS_KEPT:
        _by_identity.clear()
    _by_identity[fast] = (graph, schedule, program)
    return program


def compile(algo, dtypes: dict | None = None, sizes: dict[str, int] | None = None,
            schedule=None, target: str = DEFAULT_TARGET):
    """Compile ahead of time (no GPU needed): the Program for these dtypes and axis sizes."""
    graph = algo.graph(dtypes or {})
    sizes = derive_sizes(graph.nodes, dict(sizes or {}))   # split_axis's, concat's, ...
    missing = [a for a in graph.axis_order if a not in sizes]
    if missing:
        raise PlaitError(f"{algo.name}: compile needs the size of every axis; missing "
                         f"{', '.join(missing)}")
    sched = resolve_schedule(algo, schedule, target, graph)
    return get_program(graph, sched, sizes, True, target)


# ---------------------------------------------------------------- running

_run_handles: dict[tuple, tuple] = {}   # cheap call key -> (algo, schedule, Compiled)
_HANDLES_KEPT = 256


def _value_key(value):
    """What decides the compiled handle for one argument, read without building anything;
    None when there is no cheap answer (the call then binds everything, as without a cache)."""
    if isinstance(value, (int, float)):
        return type(value)                    # a scalar: its value is a kernel parameter
    if isinstance(value, np.ndarray):
        return (value.dtype, value.shape, value.flags.c_contiguous)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        device = value.get_device()
        return (value.dtype, value.shape, device, value.is_contiguous(),
                device < 0 or value.data_ptr() & 15 == 0)
    return None


def _run_key(algo, args, kwargs, schedule, device, target):
    if isinstance(schedule, dict):            # may be edited in place between calls
        return None
    parts = [id(algo), _schedule_key(schedule), device, target, len(args),
             lowering_switches()]
    for value in args:
        k = _value_key(value)
        if k is None:
            return None
        parts.append(k)
    for name, value in kwargs.items():
        k = _value_key(value)
        if k is None:
            return None
        parts.append((name, k))
    return tuple(parts)


def clear_run_cache() -> None:
    """Forget the handles plait.run made (tests that swap the compiler call this)."""
    _run_handles.clear()


def run(algo, *args, schedule=None, device: str = "auto", target: str | None = None, **kwargs):
    """Run `algo` on arrays (numpy, torch, CuPy); returns outputs of the same family.

    One output: that array; outputs out0, out1, ...: a tuple; named outputs: a dict.
    `schedule`: a Schedule, a dict, a file, a folder to search, or None to look one up
    for this GPU. `device`: 'auto' (the GPU when there is one), 'cpu' (the CPU
    executor of the lowered program) or 'gpu'. `target` overrides the GPU's arch.

    Each call shape (dtypes, shapes, device, schedule) gets a compiled handle
    (plait.compile) the first time; later calls find it by a cheap key and only launch.
    """
    from .compiled import Compiled
    key = _run_key(algo, args, kwargs, schedule, device, target)
    hit = _run_handles.get(key) if key is not None else None
    if hit is not None and hit[0] is algo and (hit[1] is schedule or (
            isinstance(schedule, (str, os.PathLike)) and hit[1] == schedule)):
        handle = hit[2]
        if not kwargs and len(args) == len(handle.names) and handle.defaults is not None:
            return handle.call(list(args), handle.defaults)
        tensors, scalars = binding.bind_arguments(algo, args, kwargs)
        return handle.call(list(tensors.values()), scalars)
    tensors, scalars = binding.bind_arguments(algo, args, kwargs)
    handle = Compiled(algo, tensors, scalars, schedule, device, target)
    if key is not None:
        if len(_run_handles) >= _HANDLES_KEPT:
            _run_handles.pop(next(iter(_run_handles)))
        _run_handles[key] = (algo, schedule, handle)
    return handle.call(list(tensors.values()), scalars)


def _run_cpu(graph, sched, sizes, infos, scalars, like, target) -> dict:
    """The CPU executor runs the programs as they are compiled for `target`."""
    from plait.lowering import pipeline
    inputs = {name: arrays.to_numpy(info) for name, info in infos.items()}
    outs = pipeline.emulate(graph, sched, sizes, inputs, scalars, target)
    return {name: arrays.from_numpy(outs[name], like) for name in graph.outputs}


def _release(owned, made, graph, stream, on_device) -> None:
    """Free this call's own device memory (not outputs handed to the caller)."""
    keep = [made[n] for n in graph.outputs if n in made] if on_device else []
    temps = [a for a in owned if not any(a is k for k in keep)]
    if not temps:
        return
    from . import driver
    try:
        if on_device:        # still in use by queued kernels on an asynchronous stream
            driver.synchronize(stream)
        for a in temps:
            a.free()
    except driver.CudaError:
        pass                 # the error that brought us here (if any) is the one to report
