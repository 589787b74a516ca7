"""`plait.run` and `plait.runtime.api.compile`: from arrays to a launched (or emulated) program.

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
from pathlib import Path

from plait.dsl.errors import PlaitError
from plait.dsl.reference import bind_sizes

from . import arrays, binding
from . import cache as program_cache

from plait.lowering.target import DEFAULT_TARGET  # one definition, in the target table
DEVICES = ("auto", "cpu", "gpu")
_programs: dict[tuple, object] = {}   # (graph, schedule, sizes, aligned, target) -> Program
_PROGRAMS_KEPT = 256
# Per-call fast paths keyed by object identity (the objects are kept alive in the value,
# so an id is never reused while its entry stands).
_by_identity: dict[tuple, tuple] = {}
_handles: dict[int, tuple] = {}


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
        from plait.schedule.validate import validate
        validate(found, graph)
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


def gpu_target() -> str:
    from plait.schedule.lookup import arch_of_capability

    from . import driver
    return arch_of_capability(*driver.device_capability())


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
def _multiprocessors() -> int:
    """The SMs of the device kernels will run on (a `wave` grid tile spreads over them);
    without a GPU, the planning figure of the lowering."""
    from plait.lowering.llvm_limits import SMS

    from . import driver
    return driver.multiprocessors() if driver.gpu_available() else SMS


def get_program(graph, schedule, sizes: dict[str, int], aligned: bool, target: str):
    """The compiled Program: from this process's memo, the disk cache, or the compiler."""
    import plait
    from plait.lowering import pipeline
    sms = _multiprocessors()
    fast = (id(graph), id(schedule), tuple(sizes.items()), aligned, target, sms)
    hit = _by_identity.get(fast)
    if hit is not None and hit[0] is graph and hit[1] is schedule:
        return hit[2]
    sched_dict = schedule.to_dict() if schedule is not None else None
    memo = (graph.text(), repr(sched_dict), tuple(sorted(sizes.items())), aligned, target, sms)
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
    if len(_programs) >= _PROGRAMS_KEPT:
        _programs.pop(next(iter(_programs)))
    _programs[memo] = program
    if len(_by_identity) >= _PROGRAMS_KEPT:
        _by_identity.clear()
    _by_identity[fast] = (graph, schedule, program)
    return program


def _function(kernel):
    """The loaded CUfunction of a compiled kernel, found without rehashing its PTX."""
    from . import driver
    hit = _handles.get(id(kernel))
    if hit is None or hit[0] is not kernel:
        hit = (kernel, driver.get_function(kernel.ptx, kernel.entry, kernel.name))
        _handles[id(kernel)] = hit
    return hit[1]


def compile(algo, dtypes: dict | None = None, sizes: dict[str, int] | None = None,
            schedule=None, target: str = DEFAULT_TARGET):
    """Compile ahead of time (no GPU needed): the Program for these dtypes and axis sizes."""
    graph = algo.graph(dtypes or {})
    sizes = dict(sizes or {})
    missing = [a for a in graph.axis_order if a not in sizes]
    if missing:
        raise PlaitError(f"{algo.name}: compile needs the size of every axis; missing "
                         f"{', '.join(missing)}")
    sched = resolve_schedule(algo, schedule, target, graph)
    return get_program(graph, sched, sizes, True, target)


# ---------------------------------------------------------------- running

def run(algo, *args, schedule=None, device: str = "auto", target: str | None = None, **kwargs):
    """Run `algo` on arrays (numpy, torch, CuPy); returns outputs of the same family.

    One output: that array; outputs out0, out1, ...: a tuple; named outputs: a dict.
    `schedule`: a Schedule, a dict, a file, a folder to search, or None to look one up
    for this GPU. `device`: 'auto' (the GPU when there is one), 'cpu' (the CPU
    executor of the lowered program) or 'gpu'. `target` overrides the GPU's arch.
    """
    tensors, scalars = binding.bind_arguments(algo, args, kwargs)
    infos = {name: arrays.describe(name, value) for name, value in tensors.items()}
    family, on_device = arrays.common_family(list(infos.values()))
    graph = algo.graph({name: info.dtype for name, info in infos.items()})
    sizes = bind_sizes(graph, {name: info.shape for name, info in infos.items()})
    gpu = use_gpu(device, on_device)
    arch = target or (gpu_target() if gpu else DEFAULT_TARGET)
    sched = resolve_schedule(algo, schedule, arch, graph)
    binding.check_graph_dtypes(graph, infos)
    binding.check_storage(sched, infos)
    like = next(iter(infos.values()), None)
    if gpu:
        values = _run_gpu(graph, sched, sizes, infos, scalars, arch, like)
    else:
        values = _run_cpu(graph, sched, sizes, infos, scalars, like, arch)
    return binding.package_outputs(list(graph.outputs), values)


def _run_cpu(graph, sched, sizes, infos, scalars, like, target) -> dict:
    """The CPU executor runs the programs as they are compiled for `target`."""
    from plait.lowering import pipeline
    inputs = {name: arrays.to_numpy(info) for name, info in infos.items()}
    outs = pipeline.emulate(graph, sched, sizes, inputs, scalars, target)
    return {name: arrays.from_numpy(outs[name], like) for name in graph.outputs}


def _run_gpu(graph, sched, sizes, infos, scalars, target, like) -> dict:
    from . import driver
    owned = []                    # DeviceArrays of this call, freed at the end
    pointers: dict[str, int] = {}
    for name, info in infos.items():
        if info.on_device:
            pointers[name] = info.ptr
        else:                     # host arrays go to fresh (aligned) device buffers
            copy = arrays.device_copy(info)
            owned.append(copy)
            pointers[name] = copy.ptr
    aligned = all(p % 16 == 0 for p in pointers.values())
    program = get_program(graph, sched, sizes, aligned, target)
    full = program.complete_sizes(sizes)
    on_device = like is not None and like.on_device
    family = like.family if on_device else "device"
    stream = like.stream if on_device else 0
    made: dict[str, object] = {}  # outputs and temporaries, kept alive until launched
    for buf in program.buffers:
        if buf.role == "input":
            if buf.name not in pointers:
                raise PlaitError(f"the compiled program reads input {buf.name!r}, which "
                                 f"{graph.name} does not take")
            continue
        obj, ptr = arrays.allocate(family, buf.shape(full), buf.dtype, zero=buf.zero,
                                   like=like, stream=stream)
        made[buf.name] = obj
        pointers[buf.name] = ptr
        if isinstance(obj, arrays.DeviceArray):
            owned.append(obj)
    check_each = bool(os.environ.get("PLAIT_SYNC"))   # debugging: find the kernel that faults
    try:
        for kernel in program.kernels:
            func = _function(kernel)
            args = binding.kernel_arguments(kernel, pointers, full, scalars)
            sms = driver.multiprocessors() if kernel.persistent else None
            driver.launch(func, kernel.blocks(full, sms), kernel.threads, args, stream=stream,
                          shared=kernel.dynamic_shared, kernel=kernel.name)
            if check_each:
                driver.synchronize(stream)
        missing = [n for n in graph.outputs if n not in made]
        if missing:
            raise PlaitError(f"the compiled program writes no buffer for output(s) {missing}")
        if on_device:             # stay asynchronous, as torch and CuPy are
            return {name: made[name] for name in graph.outputs}
        driver.synchronize(stream)
        return {name: arrays.from_numpy(made[name].numpy(), like) for name in graph.outputs}
    finally:
        _release(owned, made, graph, stream, on_device)


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
